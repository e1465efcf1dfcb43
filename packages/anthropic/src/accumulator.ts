import type Anthropic from "@anthropic-ai/sdk";
import { CallPhases, checkEventMembers, checkEventPart, checkStreamEvent, isCall, type CallState, type EventShape, type TextPart } from "@dispatch-once/runner";

type RawEvent = Anthropic.Messages.RawMessageStreamEvent;

// The phases and positions are the runner's, shared with every stream side.
export type { CallPhase, CallState, FailurePosition } from "@dispatch-once/runner";

export type AssistantBlock =
  | { type: "text"; text: string }
  | { type: "tool_use"; id: string; name: string; input: unknown }
  | ThinkingBlock;

/**
 * A block of the model's reasoning, kept verbatim: with thinking enabled, the API refuses a later
 * request whose assistant message lost it or altered it (its `signature` vouches for its text).
 */
export type ThinkingBlock = { type: "thinking"; thinking: string; signature: string } | { type: "redacted_thinking"; data: string };

/** The members apply() reads, by event type: anything else an event carries is not read. */
const EVENT_SHAPES: Readonly<Record<string, EventShape>> = {
  message_start: { message: "object" },
  content_block_start: { index: "number", content_block: "object" },
  content_block_delta: { index: "number", delta: "object" },
  content_block_stop: { index: "number" },
  message_delta: { delta: "object" },
};
const BLOCK_SHAPES: Readonly<Record<string, EventShape>> = { tool_use: { id: "string", name: "string" }, redacted_thinking: { data: "string" } };
const DELTA_SHAPES: Readonly<Record<string, EventShape>> = {
  input_json_delta: { partial_json: "string" },
  text_delta: { text: "string" },
  thinking_delta: { thinking: "string" },
  signature_delta: { signature: "string" },
};

/**
 * Folds raw Messages stream events into the assistant turn, tracking each tool call's phase
 * (spec STREAM-2): `content_block_start` (tool_use) announces a call, `input_json_delta` streams
 * its arguments, `content_block_stop` completes it. It never throws away state: after a
 * failure it answers where the stream died.
 */
export class TurnAccumulator extends CallPhases<CallState> {
  messageId: string | undefined;
  stopReason: string | null = null;
  /** True once message_stop arrived: the only proof the turn finished (STREAM-1), unless a call was still open then. */
  messageStopped = false;
  /**
   * Set when message_stop arrived with a tool_use block still open (no content_block_stop): the
   * stream did not establish that call, so the response is not a finished turn (STREAM-8).
   */
  openAtStop: string | undefined;
  /**
   * Set when the response reached message_stop ended for good (STREAM-13): refused by a streaming
   * classifier (`refusal`; the API refuses a conversation that carries the refused turn again), or
   * at its output limit (`max_tokens`, `model_context_window_exceeded`) with a call whose arguments
   * the limit cut (the stream did not establish that call, and the same request stops there again).
   */
  endedForGood: string | undefined;
  /** The `stop_details` of the message_delta, when it carried any (a refusal's category and explanation). */
  stopDetails: { category?: string | null; explanation?: string | null } | null = null;
  /** The response's thinking blocks by content index, merged into `content()` in their place (STREAM-15). */
  private readonly thinking = new Map<number, ThinkingBlock>();

  /**
   * Set when a second message began in the stream before message_stop (a proxy that sent the
   * request again after its upstream was cut splices the new response into the same body): the
   * attempt failed there (STREAM-8), since the new message's blocks restart the indexes and its
   * calls would reach the dispatcher beside the first message's. Also set when a block starts at
   * an index that holds a block of another type: the spliced message came without its
   * message_start (STREAM-17).
   */
  secondMessage: string | undefined;
  /**
   * Set when the provider reported an error inside the stream (an `error` event, which the SDK
   * throws as an APIError and the stream side gives back as the event): what it said, its error's
   * type and message, for the failed stream's error (STREAM-12).
   */
  providerError: string | undefined;
  /** Each index's block type, as its content_block_start gave it (STREAM-17). */
  private readonly blockTypes = new Map<number, string>();
  /** What each index's content_block_start announced (a call's id and name, a thinking block's fields): STREAM-10 compares a repeated start against it. */
  private readonly announced = new Map<number, Record<string, string>>();
  /** Indexes whose content_block_stop arrived: a delta there is a repeated event, not more content. */
  private readonly stoppedBlocks = new Set<number>();

  /** Apply one event; returns the call whose content_block_stop just arrived, if any. */
  apply(event: RawEvent): CallState | undefined {
    // Before anything is counted or folded: a malformed event changes nothing (ERR-1).
    checkStreamEvent(event, EVENT_SHAPES);
    if (event.type === "message_start") checkEventMembers(event.message, { id: "string" }, "event.message", event.type);
    else if (event.type === "content_block_start") checkEventPart(event.content_block, BLOCK_SHAPES, "event.content_block", event.type);
    else if (event.type === "content_block_delta") checkEventPart(event.delta, DELTA_SHAPES, "event.delta", event.type);
    this.eventsSeen++;
    // After message_stop nothing belongs to this response (STREAM-1); after a second message, nothing to this attempt.
    if (this.messageStopped || this.secondMessage !== undefined) return undefined;
    if ((event as { type: string }).type === "error") {
      this.providerError ??= describeProviderError((event as { error?: unknown }).error);
      return undefined;
    }
    switch (event.type) {
      case "message_start":
        if (this.messageId !== undefined && event.message.id !== this.messageId) {
          this.secondMessage = `a second message (${event.message.id}) began in the stream of ${this.messageId} before its message_stop`;
          return undefined;
        }
        this.messageId = event.message.id;
        return undefined;
      case "content_block_start": {
        const block = event.content_block;
        // An index holds one block. A block of another type there is another message's: taken in,
        // a text block would replace a tool_use that ran (its tool_result committed without it, the
        // payment told nowhere) and that message's own tool_use would run again under the next ordinal.
        const held = this.blockTypes.get(event.index);
        if (held !== undefined && held !== block.type) {
          this.secondMessage = `a ${block.type} block started at index ${event.index}, which holds a ${held} block: another message in the stream of ${this.messageId ?? "this response"}`;
          return undefined;
        }
        const announcement = announcedFields(block as unknown as Record<string, unknown>);
        const before = this.announced.get(event.index);
        if (before !== undefined) {
          // The index holds a block of this type. The same announcement is a proxy re-sending
          // events: one block per index, nothing replaced or opened anew (STREAM-10). Another one
          // (another call id or name, other thinking) is a spliced message's without its
          // message_start: taken in, its calls past this index would run again under the next
          // ordinal, and a thinking block replaced would no longer match the turn's calls.
          if (differingFields(before, announcement).length > 0) {
            this.secondMessage = `a ${block.type} block (${describeFields(announcement)}) started at index ${event.index}, which holds a ${held} block (${describeFields(before)}): another message in the stream of ${this.messageId ?? "this response"}`;
          }
          return undefined;
        }
        this.blockTypes.set(event.index, block.type);
        this.announced.set(event.index, announcement);
        if (block.type === "tool_use") {
          this.openCall({ index: event.index, callId: block.id, name: block.name, phase: "announced", partialJson: "" });
        } else if (block.type === "text") {
          this.setText(event.index, block.text ?? "");
        } else if (block.type === "thinking") {
          this.thinking.set(event.index, { type: "thinking", thinking: block.thinking ?? "", signature: block.signature ?? "" });
        } else if (block.type === "redacted_thinking") {
          this.thinking.set(event.index, { type: "redacted_thinking", data: block.data });
        }
        return undefined;
      }
      case "content_block_delta": {
        // A block's content ends at its stop: a delta after it is a re-sent event (STREAM-10).
        if (this.stoppedBlocks.has(event.index)) return undefined;
        if (event.delta.type === "input_json_delta") {
          const call = this.callAt(event.index);
          if (call !== undefined) this.appendArguments(call, event.delta.partial_json);
        } else if (event.delta.type === "text_delta") {
          this.appendText(event.index, event.delta.text);
        } else if (event.delta.type === "thinking_delta" || event.delta.type === "signature_delta") {
          const block = this.thinking.get(event.index);
          if (block?.type === "thinking") {
            if (event.delta.type === "thinking_delta") block.thinking += event.delta.thinking;
            else block.signature = event.delta.signature;
          }
        }
        return undefined;
      }
      case "content_block_stop": {
        if (this.blockTypes.has(event.index)) this.stoppedBlocks.add(event.index);
        const call = this.callAt(event.index);
        const done = call === undefined ? undefined : this.completeCall(call);
        const earlier = done === undefined ? undefined : this.repeatedCall(done);
        if (done !== undefined && earlier !== undefined) {
          done.phase = "abandoned";
          this.secondMessage = `the tool_use block at index ${done.index} (${done.callId}, ${done.name}) repeats the call at index ${earlier.index} whole, its arguments too: the call delivered again at another position in the stream of ${this.messageId ?? "this response"}`;
          return undefined;
        }
        return done;
      }
      case "message_delta":
        this.stopReason = event.delta.stop_reason ?? this.stopReason;
        this.stopDetails = event.delta.stop_details ?? this.stopDetails;
        return undefined;
      case "message_stop": {
        this.messageStopped = true;
        // Committing it would answer the message with the call gone, and store a tool_use the
        // next request carries without its tool_result, which the API refuses on every send.
        const open = this.openCalls();
        if (open.length > 0) this.openAtStop = `message_stop arrived with tool_use blocks never stopped: ${open.map((c) => `${c.name} (${c.callId})`).join(", ")}`;
        // A limit cuts the last block part-way and the API still closes it: its arguments are
        // not JSON. Committed, the turn would carry a call with arguments nobody sent.
        if (this.stopReason === "max_tokens" || this.stopReason === "model_context_window_exceeded") {
          const cut = this.calls.filter((c) => c.inputError !== undefined);
          if (cut.length > 0) this.endedForGood = `stop_reason ${this.stopReason}: the response reached its output limit inside the arguments of ${cut.map((c) => `${c.name} (${c.callId})`).join(", ")}; raise maxTokens`;
        } else if (this.stopReason === "refusal") {
          // Committed, the refused turn would make the API refuse every later request of the conversation.
          const { category, explanation } = this.stopDetails ?? {};
          this.endedForGood = `stop_reason refusal${category ? ` (${category})` : ""}: ${explanation ?? "a streaming classifier stopped the response"}`;
        }
        return undefined;
      }
      default:
        return undefined;
    }
  }

  /** The assistant message as the stream established it, for the commit. */
  content(): AssistantBlock[] {
    const block = (part: TextPart | CallState): AssistantBlock =>
      isCall(part) ? { type: "tool_use", id: part.callId, name: part.name, input: part.input ?? {} } : { type: "text", text: part.text };
    if (this.thinking.size === 0) return this.orderedParts().map(block);
    // Thinking blocks go back where the response had them: the API wants them first.
    const indexed: [number, AssistantBlock][] = [...this.parts].map(([index, part]) => [index, block(part)]);
    for (const [index, thinking] of this.thinking) indexed.push([index, { ...thinking }]);
    return indexed.sort(([a], [b]) => a - b).map(([, b]) => b);
  }
}

/** The members of a content_block_start that identify its block: equal in a re-sent start, not in another message's. */
function announcedFields(block: Record<string, unknown>): Record<string, string> {
  const keys = block.type === "tool_use" ? ["id", "name"] : block.type === "thinking" ? ["thinking", "signature"] : block.type === "redacted_thinking" ? ["data"] : ["text"];
  const fields: Record<string, string> = {};
  for (const key of keys) if (typeof block[key] === "string") fields[key] = block[key];
  return fields;
}

/**
 * The fields both announcements give, non-empty, with different values. An empty or absent one
 * says nothing (a thinking block starts with both fields empty in every message).
 */
function differingFields(held: Record<string, string>, fresh: Record<string, string>): string[] {
  return Object.keys(fresh).filter((key) => fresh[key] !== "" && held[key] !== undefined && held[key] !== "" && held[key] !== fresh[key]);
}

function describeFields(fields: Record<string, string>): string {
  const shown = Object.values(fields).filter((v) => v !== "");
  return shown.length === 0 ? "empty" : shown.map((v) => (v.length > 40 ? `${v.slice(0, 40)}…` : v)).join(", ");
}

/** An `error` event's error as the record says it: `error <type>: <message>` (STREAM-12). */
function describeProviderError(error: unknown): string {
  const { type, message } = (typeof error === "object" && error !== null ? error : {}) as { type?: unknown; message?: unknown };
  return `error ${typeof type === "string" && type !== "" ? type : "error"}: ${typeof message === "string" ? message : JSON.stringify(error) ?? "(no message)"}`;
}
