import type { CallPhases, CallState, StreamProvider } from "@dispatch-once/runner";
import type { KitRunner } from "../src/provider.js";

/**
 * The stream sides' splice checks planted out from outside, as the chaos suite plants them
 * (faults/test/crash-worker.ts): each accumulator forgets, before an event, what it needs to
 * notice the splice. Through the kit's `runner` hook, so the plant is the one runner's.
 */
type Side = StreamProvider<CallPhases<CallState>, unknown>;
type Forgetful = { blockTypes?: Map<number, string>; itemTypes?: Map<number, string>; messageId?: string; responseId?: string };
type SeenEvent = { type: string; index?: number; output_index?: number };

function forgetting(forget: (accumulator: Forgetful, event: SeenEvent) => void): (runner: KitRunner) => KitRunner {
  return (runner) => {
    const side = (runner as unknown as { provider: Side }).provider;
    const apply = side.apply.bind(side);
    side.apply = (accumulator, event) => {
      forget(accumulator as unknown as Forgetful, event as SeenEvent);
      return apply(accumulator, event);
    };
    return runner;
  };
}

/** STREAM-17's check out of both accumulators: a position forgets the type it holds before each item's event. */
export const noPositionType = forgetting((a, e) => {
  if (e.type === "content_block_start") a.blockTypes?.delete(e.index!);
  if (e.type.startsWith("response.output_item.")) a.itemTypes?.delete(e.output_index!);
});

/** STREAM-8's second-start check out: the response forgets its id before each message_start / response.created. */
export const noSecondStart = forgetting((a, e) => {
  if (e.type === "message_start") delete a.messageId;
  if (e.type === "response.created") delete a.responseId;
});
