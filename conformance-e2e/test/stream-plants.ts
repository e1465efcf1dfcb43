import type { CallPhases, CallState, StreamProvider } from "@dispatch-once/runner";
import type { KitRunner } from "../src/provider.js";

/** Planted bugs in a runner's stream side, shared by the planted-bug tests of every side. */

type Side = StreamProvider<CallPhases<CallState>, unknown>;

/**
 * A stream side that takes a body which ended without its finishing event, but without an error,
 * for a finished turn (mutation round of 2026-12-04: e2e-stream-planted.test.ts; on Chat
 * Completions a body that ended without its `finish_reason` chunk, STREAM-20: e2e-chat-planted.test.ts).
 */
export function cleanCloseTakenForTheEnd(runner: KitRunner): KitRunner {
  // The runner's own stream side, altered in place: the planted bug is in it, not around it.
  const side = (runner as unknown as { provider: Side }).provider;
  const { open, apply, finished } = { open: side.open.bind(side), apply: side.apply.bind(side), finished: side.finished.bind(side) };
  const endedCleanly = new WeakSet<object>();
  let current: object | undefined;
  side.apply = (accumulator, event) => {
    current = accumulator;
    return apply(accumulator, event);
  };
  side.open = async (input, options) => {
    const stream = await open(input, options);
    return {
      async *[Symbol.asyncIterator]() {
        for await (const event of stream) yield event;
        if (current !== undefined) endedCleanly.add(current);
      },
    };
  };
  side.finished = (accumulator) => finished(accumulator) || endedCleanly.has(accumulator);
  return runner;
}
