import type OpenAI from "openai";

type StreamEvent = OpenAI.Responses.ResponseStreamEvent;

/**
 * Where one function call is (spec STREAM-2), with the Anthropic side's phases. The accumulator
 * is the only component that knows this when a stream dies, so it keeps its state on failure.
 */
export type CallPhase =
  | "announced" // response.output_item.added (function_call) seen
  | "arguments_streaming" // at least one response.function_call_arguments.delta seen
  | "complete" // response.output_item.done with status completed: arguments final, dispatchable
  | "dispatched" // handed to the dispatcher, not yet resolved
  | "resolved" // the dispatcher answered (a result or a typed error)
  | "abandoned"; // the stream died (or the item ended incomplete) before completion: never run (STREAM-3)

export interface CallState {
  /** `output_index` of the function_call item in the response. */
  index: number;
  /** Output item id (`fc_…`): minted per response. */
  itemId: string;
  /** `call_id` (`call_…`): minted per response, so it cannot deduplicate a replay; for the record and the function_call_output only. */
  callId: string;
  name: string;
  phase: CallPhase;
  /** The argument JSON text received so far (the deltas, or the final item's `arguments`). */
  partialJson: string;
  /** Parsed arguments, once complete. */
  input?: unknown;
  /** Set when the arguments arrived complete but were not a JSON object. */
  inputError?: string;
}

export type FailurePosition = "before_any_call" | "arguments_streaming" | "during_dispatch" | "after_dispatch_before_stop";

/** How a response ended, as the stream itself said it. `undefined` while no terminal event arrived. */
export type TerminalEvent = "completed" | "incomplete" | "failed" | "error";

/** An error the stream reported in-band (`error` or `response.failed`): the SDK yields these as events, it does not throw. */
export interface StreamErrorReport {
  event: "error" | "response.failed";
  code: string | null;
  message: string;
}

/** Output items as the stream established them, in the Responses API's input-item shape (for the next request). */
export type OutputItem =
  | { type: "message"; role: "assistant"; content: string }
  | { type: "function_call"; call_id: string; name: string; arguments: string };

/**
 * Folds raw Responses stream events into the assistant turn, tracking each function call's phase.
 * A call is dispatchable at its `response.output_item.done` (status completed), long before
 * `response.completed`; only `response.completed` proves the turn finished (STREAM-1): a clean
 * end of the body without it is a failed stream, and so are `error` and `response.failed`.
 */
export class ResponsesTurnAccumulator {
  readonly calls: CallState[] = [];
  private readonly items = new Map<number, { type: "text"; text: string } | CallState>();
  responseId: string | undefined;
  terminal: TerminalEvent | undefined;
  streamError: StreamErrorReport | undefined;
  eventsSeen = 0;

  /** True once response.completed arrived: the only proof the turn finished (STREAM-1). */
  get completed(): boolean {
    return this.terminal === "completed";
  }

  /** Whether any function call completed in this response (the Responses API has no stop_reason). */
  get hasCalls(): boolean {
    return this.calls.some((c) => c.phase !== "abandoned");
  }

  /** Apply one event; returns the call whose `response.output_item.done` (status completed) just arrived. */
  apply(event: StreamEvent): CallState | undefined {
    this.eventsSeen++;
    // After a terminal event nothing more belongs to this response.
    if (this.terminal !== undefined) return undefined;
    switch (event.type) {
      case "response.created":
        this.responseId = event.response.id;
        return undefined;
      case "response.output_item.added": {
        const item = event.item;
        if (item.type === "function_call") {
          const call: CallState = { index: event.output_index, itemId: item.id ?? "", callId: item.call_id, name: item.name, phase: "announced", partialJson: "" };
          this.calls.push(call);
          this.items.set(event.output_index, call);
        } else if (item.type === "message") {
          this.items.set(event.output_index, { type: "text", text: "" });
        }
        return undefined;
      }
      case "response.function_call_arguments.delta": {
        const call = this.callAt(event.output_index);
        if (call === undefined || call.phase !== "announced" && call.phase !== "arguments_streaming") return undefined;
        call.partialJson += event.delta;
        call.phase = "arguments_streaming";
        return undefined;
      }
      case "response.output_text.delta": {
        const text = this.items.get(event.output_index);
        if (text !== undefined && !("phase" in text)) text.text += event.delta;
        return undefined;
      }
      case "response.output_item.done": {
        const item = event.item;
        if (item.type === "message") {
          // The done item is authoritative for the text (deltas may have been partial).
          const text = item.content.flatMap((p) => (p.type === "output_text" ? [p.text] : [])).join("");
          this.items.set(event.output_index, { type: "text", text });
          return undefined;
        }
        if (item.type !== "function_call") return undefined;
        let call = this.callAt(event.output_index);
        if (call === undefined) {
          // A done item without its added event: still a call the model made.
          call = { index: event.output_index, itemId: item.id ?? "", callId: item.call_id, name: item.name, phase: "announced", partialJson: "" };
          this.calls.push(call);
          this.items.set(event.output_index, call);
        }
        if (call.phase !== "announced" && call.phase !== "arguments_streaming") return undefined;
        // The final item's arguments are authoritative over the concatenated deltas.
        call.partialJson = item.arguments;
        if (item.status !== undefined && item.status !== "completed") {
          // An incomplete item (e.g. the output token limit) has unfinished arguments: never run (STREAM-3).
          call.phase = "abandoned";
          return undefined;
        }
        call.phase = "complete";
        try {
          const input: unknown = item.arguments.trim() === "" ? {} : JSON.parse(item.arguments);
          if (input === null || typeof input !== "object" || Array.isArray(input)) call.inputError = "arguments are not a JSON object";
          else call.input = input;
        } catch (error) {
          call.inputError = error instanceof Error ? error.message : String(error);
        }
        return call;
      }
      case "response.completed":
        this.terminal = "completed";
        return undefined;
      case "response.incomplete":
        this.terminal = "incomplete";
        return undefined;
      case "response.failed":
        this.terminal = "failed";
        this.streamError = { event: "response.failed", code: event.response.error?.code ?? null, message: event.response.error?.message ?? "response failed" };
        return undefined;
      case "error":
        this.terminal = "error";
        this.streamError = { event: "error", code: event.code, message: event.message };
        return undefined;
      default:
        return undefined;
    }
  }

  /** Calls whose arguments never completed are abandoned: not run, no function_call_output (STREAM-3). */
  abandonOpenCalls(): CallState[] {
    const open = this.calls.filter((c) => c.phase === "announced" || c.phase === "arguments_streaming");
    for (const call of open) call.phase = "abandoned";
    return open;
  }

  /** Where the stream died, read from the calls' phases at the moment of failure (STREAM-2). */
  failurePosition(): FailurePosition {
    // A dispatched call still running decides first: nobody can vouch for its effect yet.
    if (this.calls.some((c) => c.phase === "complete" || c.phase === "dispatched")) return "during_dispatch";
    if (this.calls.some((c) => c.phase === "announced" || c.phase === "arguments_streaming" || c.phase === "abandoned")) return "arguments_streaming";
    if (this.calls.some((c) => c.phase === "resolved")) return "after_dispatch_before_stop";
    return "before_any_call";
  }

  /** The output as the stream established it, as input items for the next request. Abandoned calls are left out. */
  output(): OutputItem[] {
    return [...this.items.entries()]
      .sort(([a], [b]) => a - b)
      .flatMap(([, item]): OutputItem[] => {
        if (!("phase" in item)) return [{ type: "message", role: "assistant", content: item.text }];
        if (item.phase === "abandoned" || item.phase === "announced" || item.phase === "arguments_streaming") return [];
        return [{ type: "function_call", call_id: item.callId, name: item.name, arguments: item.partialJson }];
      });
  }

  /** The assistant's text, joined across message items. */
  text(): string {
    return [...this.items.entries()]
      .sort(([a], [b]) => a - b)
      .flatMap(([, item]) => ("phase" in item ? [] : [item.text]))
      .join("");
  }

  private callAt(outputIndex: number): CallState | undefined {
    const item = this.items.get(outputIndex);
    return item !== undefined && "phase" in item ? item : undefined;
  }
}
