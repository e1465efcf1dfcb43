import { AsyncLocalStorage } from "node:async_hooks";
import type { ConversationStore } from "@dispatch-once/core";
import { type CallPhases, type CallState, type StreamProvider } from "@dispatch-once/runner";
import { ConformanceFailure } from "@dispatch-once/conformance/ledger";
import { expect } from "vitest";
import { runEndToEnd, type RunnerProviderName } from "../src/index.js";
import type { KitRunner } from "../src/provider.js";
import { memory } from "./audit-mutants.js";

/**
 * The stream sides' splice checks planted out from outside, as the chaos suite plants them
 * (faults/test/crash-worker.ts): each accumulator forgets, before an event, what it needs to
 * notice the splice. Through the kit's `runner` hook, so the plant is the one runner's.
 */
type Side = StreamProvider<CallPhases<CallState>, unknown>;
type Forgetful = {
  blockTypes?: Map<number, string>;
  itemTypes?: Map<number, string>;
  messageId?: string;
  responseId?: string;
  // STREAM-10's: what each position's first announcement named, and the blocks stopped.
  announced?: Map<number, unknown>;
  stoppedBlocks?: Set<number>;
  itemNames?: Map<number, unknown>;
  // STREAM-10's whole repeat: the earlier call a just-completed one repeats (CallPhases.repeatedCall).
  repeatedCall?: (call: unknown) => unknown;
};
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

/**
 * STREAM-17's check out of both accumulators: a position forgets the item it holds before each
 * item's event (its type, and what it was announced as, which STREAM-10 compares: kept, that
 * check would see the spliced item in the type's place).
 */
const forgetPositionType = (a: Forgetful, e: SeenEvent): void => {
  if (e.type === "content_block_start") {
    a.blockTypes?.delete(e.index!);
    a.announced?.delete(e.index!);
    a.stoppedBlocks?.delete(e.index!);
  }
  if (e.type.startsWith("response.output_item.")) {
    a.itemTypes?.delete(e.output_index!);
    a.itemNames?.delete(e.output_index!);
  }
};
export const noPositionType = forgetting(forgetPositionType);

/**
 * STREAM-17's check alone out of both accumulators, STREAM-8's and STREAM-10's kept: a stream side
 * that compares what an item names only against a held item of its own type (as STREAM-10 is
 * worded) and forgot the check of an item of another type at a held position, so such an item
 * takes the position, as `parts` folds it (its type and names the position's now). A spliced
 * response led by a sentence (SplicePlan `headless`) then has its message replace the call that
 * ran, and its own calls, past the held positions, dispatched. Unlike `noPositionType`, a spliced
 * item on a held one of its type is still seen. (Deleting only the type check from the OpenAI
 * accumulator is no such bug: its STREAM-10 check compares names at every type, and every output
 * item is announced with its `id`, so the message still fails the stream there.)
 */
const forgetOtherType = (a: Forgetful, e: SeenEvent): void => {
  const raw = e as SeenEvent & { content_block?: { type: string }; item?: { type: string } };
  if (e.type === "content_block_start" && a.blockTypes?.has(e.index!) === true && a.blockTypes.get(e.index!) !== raw.content_block?.type) {
    a.blockTypes.delete(e.index!);
    a.announced?.delete(e.index!);
    a.stoppedBlocks?.delete(e.index!);
  }
  if (e.type.startsWith("response.output_item.") && a.itemTypes?.has(e.output_index!) === true && a.itemTypes.get(e.output_index!) !== raw.item?.type) {
    a.itemTypes.delete(e.output_index!);
    a.itemNames?.delete(e.output_index!);
  }
};
export const noTypeCheck = forgetting(forgetOtherType);

/**
 * STREAM-8's second-start check out: the response forgets, before each message_start /
 * response.created, its id and what its positions were announced as (kept, STREAM-10 would see
 * the spliced response's first item, which names another call, on a held position).
 */
const forgetSecondStart = (a: Forgetful, e: SeenEvent): void => {
  if (e.type === "message_start") {
    delete a.messageId;
    a.announced?.clear();
    a.stoppedBlocks?.clear();
  }
  if (e.type === "response.created") {
    delete a.responseId;
    a.itemNames?.clear();
  }
};
export const noSecondStart = forgetting(forgetSecondStart);

/**
 * STREAM-10's different-item check out of both accumulators: before an announcing event at a
 * position that holds an item of its type, the position takes the event's names as its own (its
 * first announcement forgotten), so every such event reads as a delivery again and is ignored.
 * The shape that needs the check: a spliced response without its start and without a lead
 * (SplicePlan `headless_bare`), whose items land each on one of its own type (with thinking on,
 * its thinking block on the held thinking block, its first call on the call that ran).
 */
const forgetHeldItemName = (a: Forgetful, e: SeenEvent): void => {
  const raw = e as SeenEvent & { content_block?: Record<string, unknown>; item?: Record<string, unknown> };
  if (e.type === "content_block_start" && a.announced?.has(e.index!) === true && a.blockTypes?.get(e.index!) === raw.content_block?.type) {
    a.announced.set(e.index!, namesOf(raw.content_block!, ["id", "name", "thinking", "signature", "data", "text"]));
  }
  if ((e.type === "response.output_item.added" || e.type === "response.output_item.done") && a.itemNames?.has(e.output_index!) === true && a.itemTypes?.get(e.output_index!) === raw.item?.type) {
    a.itemNames.set(e.output_index!, namesOf(raw.item!, ["id", "call_id", "name"]));
  }
};
export const noHeldItemName = forgetting(forgetHeldItemName);

/**
 * STREAM-10's whole-repeat check out of both accumulators: a call that repeats an earlier call of
 * its response whole (its id, name and arguments) at another position is taken for a call of its
 * own (`repeatedCall` finds none), as a stream side that compares ids only at one position does.
 * The shape that needs the check: a relay that renumbers what it re-sends delivering a completed
 * call again at the next free position (SplicePlan `repeat`, the mocks' `repeat_call` fault).
 */
const forgetWholeRepeat = (a: Forgetful): void => {
  a.repeatedCall = () => undefined;
};
export const noWholeRepeat = forgetting(forgetWholeRepeat);

/**
 * A stream side that checks for splices in a message's first request only: on the requests after
 * its first turn (the tool loop's follow-ups, the runner's `open` option `followUp`), each
 * accumulator forgets, before each event, everything the three splice checks read (STREAM-8's
 * second start, STREAM-17's position type, STREAM-10's names). The level drew no splice into a
 * follow-up request before MessagePlan `followUpSplice`, so it could not tell this side from a sound one.
 */
export function spliceChecksOnFirstTurnOnly(runner: KitRunner): KitRunner {
  return forgetSpliceChecksWhere(runner, (options) => options.followUp === true);
}

/**
 * `runner` with its stream side forgetting, before each event of a stream `forgets` picks when it
 * is opened, everything the three splice checks read (STREAM-8's second start, STREAM-17's
 * position type, STREAM-10's names).
 */
function forgetSpliceChecksWhere(runner: KitRunner, forgets: (options: Parameters<Side["open"]>[1]) => boolean): KitRunner {
  const side = (runner as unknown as { provider: Side }).provider;
  const { open, apply } = { open: side.open.bind(side), apply: side.apply.bind(side) };
  // Set as each event is handed on, read by the apply that folds it (the runner folds each event as it arrives).
  let forgetting = false;
  side.open = async (input, options) => {
    const stream = await open(input, options);
    const forget = forgets(options);
    return {
      async *[Symbol.asyncIterator]() {
        for await (const event of stream) {
          forgetting = forget;
          yield event;
        }
      },
    };
  };
  side.apply = (accumulator, event) => {
    if (forgetting) {
      const a = accumulator as unknown as Forgetful;
      const e = event as SeenEvent;
      forgetSecondStart(a, e);
      forgetPositionType(a, e);
      forgetHeldItemName(a, e);
    }
    return apply(accumulator, event);
  };
  return runner;
}

/**
 * A stream side that skips its splice checks on a RE-ASK only: a new message sent to a
 * conversation whose last message ended failed (spec TURN-12: it is bound at the failed turn's
 * index, the runner's turn is resumed; "that failed, try again"). On every request of such a
 * send, each accumulator forgets, before each event, everything the three splice checks read
 * (STREAM-8's second start, STREAM-17's position type, STREAM-10's names), as
 * `spliceChecksOnFirstTurnOnly` does on follow-ups. The stream side cannot tell a re-ask from its
 * input (the failed message's words are not in it), so the plant reads it where the runner knows
 * it, around `send`: shared by every runner of one search (`reaskPlant()` makes one), a send of a
 * message id its conversation has not sent before is a re-ask when the store says the message
 * sent before it ended failed (every later send of its id too). A re-send of the failed message's
 * own id is a retry, not a re-ask: its checks stay. The level drew no splice into a
 * re-ask before MessagePlan `reaskSplice`, so it could not tell this side from a sound one.
 */
export function reaskPlant(): { runner: (runner: KitRunner) => KitRunner; reasks: () => number } {
  // By case and conversation: a case's conversation and message ids are the next case's too, so the
  // key is the case's account, which the kit's words for a message begin with (world.ts contentOf).
  const sent = new Map<string, string[]>();
  const reaskIds = new Set<string>();
  const inSend = new AsyncLocalStorage<boolean>();
  let reasks = 0;
  const runner = (kit: KitRunner): KitRunner => {
    forgetSpliceChecksWhere(kit, () => inSend.getStore() === true);
    const store = (kit as unknown as { options: { store: ConversationStore } }).options.store;
    const send = kit.send.bind(kit);
    kit.send = async (conversationId, message) => {
      const conversation = `${message.content.split(" ")[0]} ${conversationId}`;
      let ids = sent.get(conversation);
      if (ids === undefined) sent.set(conversation, (ids = []));
      const id = `${conversation}\n${message.id}`;
      if (!ids.includes(message.id)) {
        const before = ids[ids.length - 1];
        ids.push(message.id);
        if (before !== undefined && (await store.message(conversationId, before))?.state === "failed") {
          reaskIds.add(id);
          reasks++;
        }
      }
      // Every send of a re-ask's id (its re-sends, a redelivery) is the re-ask's.
      return inSend.run(reaskIds.has(id), () => send(conversationId, message));
    };
    return kit;
  };
  return { runner, reasks: () => reasks };
}

function namesOf(item: Record<string, unknown>, keys: string[]): Record<string, string> {
  const names: Record<string, string> = {};
  for (const key of keys) if (typeof item[key] === "string") names[key] = item[key];
  return names;
}

/**
 * The control of a splice plant's search: the real runner over the same scenarios (the runs up to
 * the one that failed the plant, `message` says how many) passes them; its run's stats, for the
 * test to check it met the splice it is about.
 */
export async function controlOverSameRuns(provider: RunnerProviderName, seed: number, error: unknown, message: string): Promise<Record<string, number>> {
  const runs = Number(/after (\d+) runs/.exec(message)![1]);
  expect((error as ConformanceFailure).counterexample!.seed).toBe(seed);
  let seen: Record<string, number> = {};
  await runEndToEnd(memory, { deploys: false, provider, runs, seed, onStats: (stats) => (seen = stats) });
  expect(seen).toMatchObject({ property_cases: runs });
  return seen;
}
