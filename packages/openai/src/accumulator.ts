import type OpenAI from "openai";
import { CallPhases, checkEventMembers, checkEventPart, checkStreamEvent, isCall, type CallState as SharedCallState, type EventShape, type TextPart } from "@dispatch-once/runner";

type StreamEvent = OpenAI.Responses.ResponseStreamEvent;

// The phases and positions are the shared runner's (@dispatch-once/runner); on this stream:
// announced = response.output_item.added (function_call); arguments_streaming = a
// response.function_call_arguments.delta seen; complete = response.output_item.done with status
// completed (dispatchable); abandoned = the stream died, or the item ended incomplete, first.
export type { CallPhase, FailurePosition } from "@dispatch-once/runner";

export interface CallState extends SharedCallState {
  /** `output_index` of the function_call item in the response. */
  index: number;
  /** Output item id (`fc_…`): minted per response. */
  itemId: string;
  /** `call_id` (`call_…`): minted per response, so it cannot deduplicate a replay; for the record and the function_call_output only. */
  callId: string;
}

/** How a response ended, as the stream itself said it. `undefined` while no terminal event arrived. */
export type TerminalEvent = "completed" | "incomplete" | "failed" | "error";

/**
 * Why a response ended without `response.completed`, as the stream said it in-band (`error`,
 * `response.failed`, `response.incomplete`): the SDK yields these as events, it does not throw.
 */
export interface StreamErrorReport {
  /**
   * `response.completed` when it lists a function call the stream never completed (STREAM-8);
   * `response.created` when a second response began in the stream; `response.output_item.added` /
   * `.done` when an item came at a position that holds an item of another type (STREAM-17).
   */
  event: "error" | "response.failed" | "response.incomplete" | "response.completed" | "response.created" | "response.output_item.added" | "response.output_item.done";
  code: string | null;
  message: string;
}

/** Output items as the stream established them, in the Responses API's input-item shape (for the next request). */
export type OutputItem =
  /** A message of a response without reasoning: its role and text, as committed from the start. */
  | { type: "message"; role: "assistant"; content: string }
  /**
   * A message beside a reasoning item: the output message item as the stream delivered it (its
   * `msg_` id, `status`, `output_text` / `refusal` parts). The API pairs a reasoning item with the
   * item after it by that item's id, and refuses a reasoning item followed by an id-less message.
   */
  | OpenAI.Responses.ResponseOutputMessage
  /** `id` (the item id, `fc_…`) is kept beside a reasoning item only: the API pairs the two by it. */
  | { type: "function_call"; id?: string; call_id: string; name: string; arguments: string }
  | OpenAI.Responses.ResponseReasoningItem;

/** The members apply() reads, by event type: anything else an event carries is not read. */
const EVENT_SHAPES: Readonly<Record<string, EventShape>> = {
  "response.created": { response: "object" },
  "response.output_item.added": { output_index: "number", item: "object" },
  "response.function_call_arguments.delta": { output_index: "number", delta: "string" },
  "response.output_text.delta": { output_index: "number", delta: "string" },
  "response.refusal.delta": { output_index: "number", delta: "string" },
  "response.output_item.done": { output_index: "number", item: "object" },
  "response.incomplete": { response: "object" },
  "response.failed": { response: "object" },
  error: { message: "string" },
};
const ADDED_ITEM_SHAPES: Readonly<Record<string, EventShape>> = { function_call: { call_id: "string", name: "string" } };
const DONE_ITEM_SHAPES: Readonly<Record<string, EventShape>> = { function_call: { call_id: "string", name: "string" }, message: { content: "array" } };

/**
 * Folds raw Responses stream events into the assistant turn, tracking each function call's phase.
 * A call is dispatchable at its `response.output_item.done` (status completed), long before
 * `response.completed`; only `response.completed` proves the turn finished (STREAM-1): a clean
 * end of the body without it is a failed stream, and so are `error` and `response.failed`.
 */
export class ResponsesTurnAccumulator extends CallPhases<CallState> {
  responseId: string | undefined;
  terminal: TerminalEvent | undefined;
  /**
   * The response's reasoning items as done, by output index: sent back in their place with the
   * turn, so a reasoning model keeps its reasoning across the turn's requests (STREAM-15).
   */
  private readonly reasoning = new Map<number, OpenAI.Responses.ResponseReasoningItem>();
  /**
   * The response's message items: as done, by output index (committed as delivered beside a
   * reasoning item), and the item id each one's added event gave (when no done item came).
   */
  private readonly messages = new Map<number, OpenAI.Responses.ResponseOutputMessage>();
  private readonly messageIds = new Map<number, string>();
  /** Each position's item type, as its first added or done event gave it (STREAM-17). */
  private readonly itemTypes = new Map<number, string>();
  /** What each position's first added or done event named (item id, call_id, name): STREAM-10 compares a repeated one against it. */
  private readonly itemNames = new Map<number, Record<string, string>>();
  streamError: StreamErrorReport | undefined;

  /**
   * True once response.completed arrived: the only proof the turn finished (STREAM-1), unless it
   * lists a function call whose output_item.done the stream never delivered (STREAM-8).
   */
  get completed(): boolean {
    return this.terminal === "completed" && this.streamError === undefined;
  }

  /** Whether any function call completed in this response (the Responses API has no stop_reason). */
  get hasCalls(): boolean {
    const open = this.openCalls();
    return this.calls.some((c) => c.phase !== "abandoned" && !open.includes(c));
  }

  /** Apply one event; returns the call whose `response.output_item.done` (status completed) just arrived. */
  apply(event: StreamEvent): CallState | undefined {
    // Before anything is counted or folded: a malformed event changes nothing (ERR-1).
    checkStreamEvent(event, EVENT_SHAPES);
    if (event.type === "response.created") checkEventMembers(event.response, { id: "string" }, "event.response", event.type);
    else if (event.type === "response.output_item.added") checkEventPart(event.item, ADDED_ITEM_SHAPES, "event.item", event.type);
    else if (event.type === "response.output_item.done") {
      checkEventPart(event.item, DONE_ITEM_SHAPES, "event.item", event.type);
      if (event.item.type === "message") event.item.content.forEach((part, i) => checkEventPart(part, {}, `event.item.content[${i}]`, event.type));
    }
    this.eventsSeen++;
    // After a terminal event nothing more belongs to this response.
    if (this.terminal !== undefined) return undefined;
    if (event.type === "response.output_item.added" || event.type === "response.output_item.done") {
      // A position holds one item. An item of another type there is another response's (a proxy
      // that spliced the response of a request it sent again in without its response.created):
      // taken in, a message would replace a call that ran (its output committed without it, the
      // payment told nowhere) and that response's own call would run again under the next ordinal.
      const held = this.itemTypes.get(event.output_index);
      if (held !== undefined && held !== event.item.type) {
        this.terminal = "error";
        this.streamError = {
          event: event.type,
          code: "output_index_reused",
          message: `a ${event.item.type} item at output_index ${event.output_index}, which holds a ${held} item: another response in the stream of ${this.responseId ?? "this response"}`,
        };
        return undefined;
      }
      this.itemTypes.set(event.output_index, event.item.type);
      // The same type but another item (another id, call_id or name): a spliced response whose
      // items land each on one of its own type (reasoning on reasoning, its first call on the
      // first call). Taken for a re-delivery, its calls past the held positions would run again
      // under the next ordinal. The same item named again is a re-delivery (STREAM-10).
      const named = itemFields(event.item as unknown as Record<string, unknown>);
      const before = this.itemNames.get(event.output_index);
      if (before === undefined) this.itemNames.set(event.output_index, named);
      else if (differingFields(before, named).length > 0) {
        this.terminal = "error";
        this.streamError = {
          event: event.type,
          code: "output_index_reused",
          message: `a ${event.item.type} item (${describeFields(named)}) at output_index ${event.output_index}, which holds the ${held} item (${describeFields(before)}): another response in the stream of ${this.responseId ?? "this response"}`,
        };
        return undefined;
      }
    }
    switch (event.type) {
      case "response.created":
        // A body carries one response. Another one in it (a proxy that sent the request again and
        // splices the new response in) restarts the positions, so its calls would be new calls to
        // the dispatcher beside the first response's: the attempt ends here, failed (STREAM-8).
        if (this.responseId !== undefined && event.response.id !== this.responseId) {
          this.terminal = "error";
          this.streamError = { event: "response.created", code: "second_response", message: `a second response (${event.response.id}) began in the stream of ${this.responseId}` };
          return undefined;
        }
        this.responseId = event.response.id;
        return undefined;
      case "response.output_item.added": {
        const item = event.item;
        if (item.type === "function_call") {
          this.openCall({ index: event.output_index, itemId: item.id ?? "", callId: item.call_id, name: item.name, phase: "announced", partialJson: "" });
        } else if (item.type === "message") {
          this.setText(event.output_index, "");
          if (typeof item.id === "string" && item.id !== "") this.messageIds.set(event.output_index, item.id);
        }
        return undefined;
      }
      case "response.function_call_arguments.delta": {
        const call = this.callAt(event.output_index);
        if (call !== undefined) this.appendArguments(call, event.delta);
        return undefined;
      }
      case "response.output_text.delta":
      case "response.refusal.delta":
        this.appendText(event.output_index, event.delta);
        return undefined;
      case "response.output_item.done": {
        const item = event.item;
        if (item.type === "reasoning") {
          // As the stream delivered it: its id, summary and (with include) encrypted content.
          this.reasoning.set(event.output_index, structuredClone(item));
          return undefined;
        }
        if (item.type === "message") {
          // The done item is authoritative for the text (deltas may have been partial); a refusal is
          // the model's answer too, and committing it as "" would tell the user nothing.
          this.setText(event.output_index, item.content.flatMap((p) => (p.type === "output_text" ? [p.text] : p.type === "refusal" ? [p.refusal] : [])).join(""));
          // As the stream delivered it: its id, status and parts (a refusal stays a refusal part).
          this.messages.set(event.output_index, structuredClone(item));
          return undefined;
        }
        if (item.type !== "function_call") return undefined;
        // A done item without its added event: still a call the model made.
        const call =
          this.callAt(event.output_index) ??
          this.openCall({ index: event.output_index, itemId: item.id ?? "", callId: item.call_id, name: item.name, phase: "announced", partialJson: "" });
        if (item.status !== undefined && item.status !== "completed") {
          // An incomplete item (e.g. the output token limit) has unfinished arguments: never run (STREAM-3).
          if (call.phase === "announced" || call.phase === "arguments_streaming") {
            call.partialJson = item.arguments;
            call.phase = "abandoned";
          }
          return undefined;
        }
        // The final item's arguments are authoritative over the concatenated deltas (STREAM-10) when
        // it repeats them: an empty string after streamed deltas is a gateway leaving them out, and
        // reading it as {} would run the tool with none of the model's arguments.
        const repeated = typeof item.arguments === "string" && !(item.arguments === "" && call.partialJson !== "");
        const done = this.completeCall(call, repeated ? { json: item.arguments, requireObject: true } : { requireObject: true });
        // Two items of their own (distinct item ids) are two calls, whatever their call_ids say: the
        // earlier call repeated is one of the same item (or of none), looked for among them all, so
        // that an earlier twin under another item id does not hide it (two calls under one call_id,
        // then a relay's repeat of the second, would otherwise run it again under ordinal 2).
        const earlier = done === undefined ? undefined : this.repeatedCall(done, (earlier) => earlier.itemId === "" || done.itemId === "" || earlier.itemId === done.itemId);
        if (done !== undefined && earlier !== undefined) {
          done.phase = "abandoned";
          this.terminal = "error";
          this.streamError = {
            event: "response.output_item.done",
            code: "output_item_repeated",
            message: `the function_call at output_index ${done.index} (${done.callId}, ${done.name}) repeats the call at output_index ${earlier.index} whole, its arguments too: the call delivered again at another position in the stream of ${this.responseId ?? "this response"}`,
          };
          return undefined;
        }
        return done;
      }
      case "response.completed": {
        this.terminal = "completed";
        // The response's output names the calls it made. One the stream announced but never
        // completed, or never showed at all (a gateway that dropped its output_item.done), was
        // not established by the stream: committing without it would answer the message with
        // the call silently gone, so this is a failed stream (STREAM-8).
        const listed = Array.isArray(event.response?.output) ? event.response.output : [];
        // Counted per call_id: a server that repeats call_ids may have dropped one of two calls under one.
        const shown = new Map<string, number>();
        for (const c of this.calls) shown.set(c.callId, (shown.get(c.callId) ?? 0) + 1);
        const neverShown = listed.flatMap((item) => {
          if (item.type !== "function_call" || (item.status !== undefined && item.status !== "completed")) return [];
          const left = shown.get(item.call_id) ?? 0;
          shown.set(item.call_id, left - 1);
          return left > 0 ? [] : [`${item.name} (${item.call_id})`];
        });
        // An item that ended with another status than completed was abandoned (STREAM-7): a
        // completed response holding it did not establish that call either.
        const unfinished = this.calls.filter((c) => c.phase === "abandoned" || this.openCalls().includes(c));
        const missing = [...unfinished.map((c) => `${c.name} (${c.callId})`), ...neverShown];
        if (missing.length > 0) {
          this.streamError = {
            event: "response.completed",
            code: "function_call_not_completed",
            message: `response.completed lists function calls the stream did not complete (no response.output_item.done, or one with another status than completed): ${missing.join(", ")}`,
          };
        }
        return undefined;
      }
      case "response.incomplete":
        this.terminal = "incomplete";
        this.streamError = {
          event: "response.incomplete",
          code: event.response.incomplete_details?.reason ?? null,
          message: `response incomplete (${event.response.incomplete_details?.reason ?? "no reason given"})`,
        };
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

  /** The output as the stream established it, as input items for the next request. Calls that did not complete are left out. */
  output(): OutputItem[] {
    // Beside a reasoning item a call keeps its item id and a message is the item as delivered (its
    // id, status and parts): the API pairs a reasoning item with the item that follows it by that
    // id, and refuses a request whose reasoning item is followed by an item without it (STREAM-15).
    // Without reasoning a turn commits its calls and text as it always did.
    const reasoned = this.reasoning.size > 0;
    const item = (index: number, part: TextPart | CallState): OutputItem[] => {
      if (!isCall(part)) return [reasoned ? this.deliveredMessage(index, part.text) : { type: "message", role: "assistant", content: part.text }];
      if (part.phase === "abandoned" || part.phase === "announced" || part.phase === "arguments_streaming") return [];
      const id = reasoned && part.itemId !== "" ? { id: part.itemId } : {};
      return [{ type: "function_call", ...id, call_id: part.callId, name: part.name, arguments: part.partialJson }];
    };
    const indexed: [number, OutputItem[]][] = [...this.parts].map(([index, part]) => [index, item(index, part)]);
    for (const [index, reasoning] of this.reasoning) indexed.push([index, [structuredClone(reasoning)]]);
    return indexed.sort(([a], [b]) => a - b).flatMap(([, items]) => items);
  }

  /**
   * The message item at `index` as its done event delivered it; one whose done item never came
   * (its text from the deltas, in a response that completed) is built in the same shape, with the
   * id its added event gave.
   */
  private deliveredMessage(index: number, text: string): OpenAI.Responses.ResponseOutputMessage {
    const delivered = this.messages.get(index);
    if (delivered !== undefined) return structuredClone(delivered);
    const id = this.messageIds.get(index);
    return { type: "message", ...(id !== undefined ? { id } : {}), role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] } as OpenAI.Responses.ResponseOutputMessage;
  }

  /** The assistant's text, joined across message items. */
  text(): string {
    return this.orderedParts()
      .flatMap((part) => (isCall(part) ? [] : [part.text]))
      .join("");
  }
}

/** The members that name an output item: equal when a proxy delivers its event again, not in another response's item. */
function itemFields(item: Record<string, unknown>): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const key of ["id", "call_id", "name"]) if (typeof item[key] === "string") fields[key] = item[key];
  return fields;
}

/** The fields both give, non-empty, with different values: an absent or empty one (a gateway leaving it out) says nothing. */
function differingFields(held: Record<string, string>, fresh: Record<string, string>): string[] {
  return Object.keys(fresh).filter((key) => fresh[key] !== "" && held[key] !== undefined && held[key] !== "" && held[key] !== fresh[key]);
}

function describeFields(fields: Record<string, string>): string {
  const shown = Object.values(fields).filter((v) => v !== "");
  return shown.length === 0 ? "unnamed" : shown.join(", ");
}
