import { describe, expect, it } from "vitest";
import { StreamIncompleteError } from "../src/index.js";

// Found by the Chat Completions trial (trials/app-chat-vllm): a response that stopped at its output
// limit was told to the user and the operator as "the stream ended after 25 events without
// finish_reason (finish_reason length: ...)": the finishing event did arrive, with a reason that
// ends the response for good. The message must say what happened, and still say the finishing
// event is missing when it is.
describe("StreamIncompleteError's message", () => {
  it("STREAM-13 a final stop is told as a stop for good, never as a stream without its finishing event", () => {
    const chat = new StreamIncompleteError(25, "finish_reason", "finish_reason length: the response stopped for good (finish_reason length)", "length");
    expect(chat.message).not.toContain("without finish_reason");
    expect(chat.message).toBe("the response stopped for good after 25 events (length), so the same request is not sent again (finish_reason length: the response stopped for good (finish_reason length))");
    const messages = new StreamIncompleteError(12, "message_stop", "stop_reason max_tokens inside a tool call", "max_tokens");
    expect(messages.message).not.toContain("without message_stop");
    expect(messages.message).toContain("stopped for good after 12 events (max_tokens)");
  });

  it("STREAM-1 a stream that ended or went silent without its finishing event still says so", () => {
    expect(new StreamIncompleteError(7, "finish_reason").message).toBe("the stream ended after 7 events without finish_reason");
    expect(new StreamIncompleteError(7, "response.completed", "error: overloaded").message).toBe("the stream ended after 7 events without response.completed (error: overloaded)");
    expect(new StreamIncompleteError(3, "message_stop", undefined, undefined, 300_000).message).toContain("idle for 300000 ms");
  });
});
