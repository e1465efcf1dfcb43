import { sameJsonData } from "@dispatch-once/core/internal";

/**
 * Where one tool call is (spec STREAM-2), in every provider's stream. The accumulator is the
 * only component that knows this when a stream dies, which is why it keeps its state on error.
 * Each stream side maps its own events onto these phases (see its accumulator's docs).
 */
export type CallPhase =
  | "announced" // the call's block or item opened
  | "arguments_streaming" // at least one argument fragment seen
  | "complete" // the provider said the arguments are final: dispatchable
  | "dispatched" // handed to the dispatcher, not yet resolved
  | "resolved" // the dispatcher answered (a result or a typed error)
  | "abandoned"; // the stream died before the call completed: never run (STREAM-3)

export interface CallState {
  /** The call's position in the response (content block index, output index). */
  index: number;
  /** Provider call id (toolu_…, call_…): minted per response, for the conversation record and logs only. */
  callId: string;
  name: string;
  phase: CallPhase;
  /** The argument JSON text received so far. */
  partialJson: string;
  /** Parsed arguments, once complete. */
  input?: unknown;
  /** Set when arguments arrived complete but were not acceptable JSON. */
  inputError?: string;
}

export type FailurePosition = "before_any_call" | "arguments_streaming" | "during_dispatch" | "after_dispatch_before_stop";

/** A text part of the response, kept beside the calls so the commit keeps the model's order. */
export interface TextPart {
  type: "text";
  text: string;
}

/**
 * The phase bookkeeping every stream side shares: the calls in order, their transitions, and
 * the answer to "where did the stream die". A provider's accumulator extends it and only maps
 * its own events onto `openCall` / `appendArguments` / `completeCall` and the text helpers.
 */
export class CallPhases<C extends CallState = CallState> {
  readonly calls: C[] = [];
  eventsSeen = 0;
  /** Text parts and calls by their position in the response. */
  protected readonly parts = new Map<number, TextPart | C>();

  /** Calls announced whose arguments have not become final (not yet dispatchable). */
  openCalls(): C[] {
    return this.calls.filter(isOpen);
  }

  /** Calls whose arguments never finished are abandoned: not run, no result (STREAM-3). */
  abandonOpenCalls(): C[] {
    const open = this.openCalls();
    for (const call of open) call.phase = "abandoned";
    return open;
  }

  /** Where the stream died, read from the calls' phases at the moment of failure (STREAM-2). */
  failurePosition(): FailurePosition {
    // STREAM-2's order: a dispatched call still running decides first, since its effect is the
    // one nobody can vouch for yet; an open call beside it is abandoned either way.
    if (this.calls.some((c) => c.phase === "complete" || c.phase === "dispatched")) return "during_dispatch";
    if (this.calls.some((c) => isOpen(c) || c.phase === "abandoned")) return "arguments_streaming";
    if (this.calls.some((c) => c.phase === "resolved")) return "after_dispatch_before_stop";
    return "before_any_call";
  }

  /**
   * A call the stream announced at `call.index`; the call already there when the index holds one.
   * A position holds one call: its start delivered again (a proxy re-sending events) is the same
   * call, and opened anew its completing event would dispatch it a second time (STREAM-10). Not
   * by call id: some servers give two calls of one response the same one.
   */
  protected openCall(call: C): C {
    const known = this.callAt(call.index);
    if (known !== undefined) return known;
    this.calls.push(call);
    this.parts.set(call.index, call);
    return call;
  }

  /** An argument fragment; ignored once the call stopped streaming (a late or repeated event). */
  protected appendArguments(call: C, fragment: string): void {
    if (!isOpen(call)) return;
    call.partialJson += fragment;
    call.phase = "arguments_streaming";
  }

  /**
   * The provider said the arguments are final. Returns the call when it just became
   * dispatchable, undefined when it was not open (a repeated event must not dispatch twice).
   * `json` replaces the fragments when the provider repeats the whole text (it is authoritative).
   */
  protected completeCall(call: C, options: { json?: string; requireObject?: boolean } = {}): C | undefined {
    if (!isOpen(call)) return undefined;
    if (options.json !== undefined) call.partialJson = options.json;
    call.phase = "complete";
    try {
      // Providers send no fragment at all for an empty input.
      const input: unknown = call.partialJson.trim() === "" ? {} : JSON.parse(call.partialJson);
      if (options.requireObject === true && (input === null || typeof input !== "object" || Array.isArray(input))) {
        call.inputError = "arguments are not a JSON object";
      } else {
        call.input = input;
      }
    } catch (error) {
      call.inputError = error instanceof Error ? error.message : String(error);
    }
    return call;
  }

  /**
   * The earlier call of this response that `call`, just complete, repeats whole at another position:
   * the same non-empty id, the same name and the same arguments. That is one call delivered again, by
   * a relay that renumbers what it re-sends; dispatched, it would run again under the next ordinal,
   * a second effect for one ask (STREAM-10). Two calls that share an id and differ in their
   * arguments are two calls (some models and servers repeat ids), and so are identical calls
   * under distinct ids (TURN-4). The caller fails the stream there and marks the call abandoned.
   * `sameItem` narrows the earlier calls to those `call` may be a delivery of (the Responses API's:
   * the same item id, or none), so that an earlier call that matches by id, name and arguments but
   * is an item of its own does not hide the one `call` repeats.
   */
  protected repeatedCall(call: C, sameItem: (earlier: C) => boolean = () => true): C | undefined {
    if (call.callId === "" || call.input === undefined) return undefined;
    return this.calls.find((c) => sameItem(c) && c !== call && c.index !== call.index && c.callId === call.callId && c.name === call.name && c.input !== undefined && sameJsonData(c.input, call.input));
  }

  protected callAt(index: number): C | undefined {
    const part = this.parts.get(index);
    return part !== undefined && isCall(part) ? part : undefined;
  }

  /** Begins (or replaces) the text part at `index`. */
  protected setText(index: number, text: string): void {
    this.parts.set(index, { type: "text", text });
  }

  /** Adds to the text part `setText` began at `index`; any other index is ignored (a delta for a block that never started). */
  protected appendText(index: number, text: string): void {
    const part = this.parts.get(index);
    if (part !== undefined && !isCall(part)) part.text += text;
  }

  /** Text parts and calls in response order. */
  protected orderedParts(): (TextPart | C)[] {
    return [...this.parts.entries()].sort(([a], [b]) => a - b).map(([, part]) => part);
  }
}

export function isCall<C extends CallState>(part: TextPart | C): part is C {
  return "phase" in part;
}

function isOpen(call: CallState): boolean {
  return call.phase === "announced" || call.phase === "arguments_streaming";
}
