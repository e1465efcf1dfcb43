import type Anthropic from "@anthropic-ai/sdk";

type RawEvent = Anthropic.Messages.RawMessageStreamEvent;

/**
 * Where one tool_use block is (spec STREAM-2): the accumulator is the only component that
 * knows this when a stream dies, which is why it keeps its state on error.
 */
export type CallPhase =
  | "announced" // content_block_start seen
  | "arguments_streaming" // at least one input_json_delta seen
  | "complete" // content_block_stop seen: arguments final, dispatchable
  | "dispatched" // handed to the dispatcher, not yet resolved
  | "resolved" // the dispatcher answered (a result or a typed error)
  | "abandoned"; // the stream died before content_block_stop: never run (STREAM-3)

export interface CallState {
  /** Content block index in the assistant message. */
  index: number;
  /** Provider id (toolu_...): minted per response, for the conversation record and logs only. */
  callId: string;
  name: string;
  phase: CallPhase;
  /** The argument JSON text received so far. */
  partialJson: string;
  /** Parsed arguments, once complete. */
  input?: unknown;
  /** Set when arguments arrived complete but were not JSON. */
  inputError?: string;
}

export type FailurePosition =
  | "before_any_call"
  | "arguments_streaming"
  | "during_dispatch"
  | "after_dispatch_before_stop";

export type AssistantBlock =
  | { type: "text"; text: string }
  | { type: "tool_use"; id: string; name: string; input: unknown };

/**
 * Folds raw Messages stream events into the assistant turn, tracking each tool call's
 * phase. It never throws away state: after a failure it answers where the stream died.
 */
export class TurnAccumulator {
  readonly calls: CallState[] = [];
  private readonly blocks = new Map<number, { type: "text"; text: string } | CallState>();
  messageId: string | undefined;
  stopReason: string | null = null;
  /** True once message_stop arrived: the only proof the turn finished (STREAM-1). */
  messageStopped = false;
  eventsSeen = 0;

  /** Apply one event; returns the call whose content_block_stop just arrived, if any. */
  apply(event: RawEvent): CallState | undefined {
    this.eventsSeen++;
    switch (event.type) {
      case "message_start":
        this.messageId = event.message.id;
        return undefined;
      case "content_block_start": {
        const block = event.content_block;
        if (block.type === "tool_use") {
          const call: CallState = { index: event.index, callId: block.id, name: block.name, phase: "announced", partialJson: "" };
          this.calls.push(call);
          this.blocks.set(event.index, call);
        } else if (block.type === "text") {
          this.blocks.set(event.index, { type: "text", text: block.text ?? "" });
        }
        return undefined;
      }
      case "content_block_delta": {
        const block = this.blocks.get(event.index);
        if (block === undefined) return undefined;
        if (event.delta.type === "input_json_delta" && "phase" in block) {
          block.partialJson += event.delta.partial_json;
          block.phase = "arguments_streaming";
        } else if (event.delta.type === "text_delta" && !("phase" in block)) {
          block.text += event.delta.text;
        }
        return undefined;
      }
      case "content_block_stop": {
        const block = this.blocks.get(event.index);
        if (block === undefined || !("phase" in block)) return undefined;
        block.phase = "complete";
        try {
          // The API sends no fragment at all for an empty input.
          block.input = block.partialJson.trim() === "" ? {} : JSON.parse(block.partialJson);
        } catch (error) {
          block.inputError = error instanceof Error ? error.message : String(error);
        }
        return block;
      }
      case "message_delta":
        this.stopReason = event.delta.stop_reason ?? this.stopReason;
        return undefined;
      case "message_stop":
        this.messageStopped = true;
        return undefined;
      default:
        return undefined;
    }
  }

  /** Calls whose arguments never finished are abandoned: not run, no tool_result (STREAM-3). */
  abandonOpenCalls(): CallState[] {
    const open = this.calls.filter((c) => c.phase === "announced" || c.phase === "arguments_streaming");
    for (const call of open) call.phase = "abandoned";
    return open;
  }

  /** Where the stream died, read from the calls' phases at the moment of failure (STREAM-2). */
  failurePosition(): FailurePosition {
    // STREAM-2's order: a dispatched call still running decides first, since its effect is the
    // one nobody can vouch for yet; an open call beside it is abandoned either way.
    if (this.calls.some((c) => c.phase === "complete" || c.phase === "dispatched")) return "during_dispatch";
    if (this.calls.some((c) => c.phase === "announced" || c.phase === "arguments_streaming" || c.phase === "abandoned")) {
      return "arguments_streaming";
    }
    if (this.calls.some((c) => c.phase === "resolved")) return "after_dispatch_before_stop";
    return "before_any_call";
  }

  /** The assistant message as the stream established it, for the commit. */
  content(): AssistantBlock[] {
    return [...this.blocks.entries()]
      .sort(([a], [b]) => a - b)
      .map(([, block]) =>
        "phase" in block
          ? { type: "tool_use" as const, id: block.callId, name: block.name, input: block.input ?? {} }
          : { type: "text" as const, text: block.text },
      );
  }
}
