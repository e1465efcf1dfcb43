import type { RunnerEvent } from "@dispatch-once/anthropic";

/**
 * One conversation's streamed text as a UI shows it: kept per (turn, attempt), so that an attempt
 * the runner discards (its stream died and is retried, or the turn failed) is dropped whole.
 * Pass `onEvent` to the runner's `onEvent` option (the runner reports every conversation it runs).
 */
export class StreamedText {
  private readonly parts = new Map<string, string>(); // "turn/attempt" -> text, in arrival order

  constructor(private readonly conversationId: string) {}

  onEvent = (event: RunnerEvent): void => {
    if (event.conversationId !== this.conversationId) return;
    const part = `${event.turnIndex}/${event.attempt}`;
    if (event.type === "text_delta") this.parts.set(part, (this.parts.get(part) ?? "") + event.text);
    // The stream never established this text: a retry streams the turn anew.
    if (event.type === "attempt_discarded") this.parts.delete(part);
  };

  get text(): string {
    return [...this.parts.values()].join("");
  }
}
