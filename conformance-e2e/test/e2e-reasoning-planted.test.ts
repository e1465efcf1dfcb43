import { MemoryConversationStore, type ConversationStore, type JsonValue, type TurnCommit } from "@dispatch-once/core";
import type { CallPhases, CallState, StreamProvider } from "@dispatch-once/runner";
import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import type { KitRunner } from "../src/provider.js";
import { memory } from "./audit-mutants.js";
import { expectReadable } from "./readable.js";

/*
 * STREAM-15 on the OpenAI runner profile: every response that makes calls opens with a reasoning
 * item (fresh id and encrypted content per response), which the committed turn must keep as the
 * committing attempt's stream delivered it, in its place, and never take from an attempt that did
 * not commit. The profile drew no reasoning item before, so a store or stream side that drops,
 * alters or mixes them passed every run. The searches run CI's OpenAI certification (e2e.test.ts:
 * seed 20261201, 30 runs) and stop at the first failing scenario, unshrunk (the verdict names the
 * item and the request that delivered it; shrinking cost 6 s of CPU).
 */
const CI = { seed: 20261201, runs: 30 };
const SEARCH_BUDGET_MS = 120_000;

type Item = { type?: string; encrypted_content?: unknown };

/** A store that rewrites the items of every committed turn before it keeps them; the rest is the real store's. */
function rewritingStore(rewrite: (items: Item[]) => Item[]): ({ now }: { now: () => number }) => ConversationStore {
  return ({ now }) => {
    const inner = new MemoryConversationStore({ now });
    const strip = (commit: TurnCommit): TurnCommit => (Array.isArray(commit.assistant) ? { ...commit, assistant: rewrite(commit.assistant as Item[]) as unknown as JsonValue } : commit);
    return new Proxy(inner, {
      get(target, property) {
        if (property === "commitTurn") return (conversationId: string, commit: TurnCommit) => target.commitTurn(conversationId, strip(commit));
        const value = Reflect.get(target, property, target) as unknown;
        return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
  };
}

/** An adopter's store that validates items against its own schema: assistant messages and calls, nothing else. */
const dropsReasoning = rewritingStore((items) => items.filter((i) => i.type !== "reasoning"));

/** A store that keeps the reasoning item but not its opaque blob as given (re-encoded on the way in). */
const altersEncryptedContent = rewritingStore((items) =>
  items.map((i) => (i.type === "reasoning" && typeof i.encrypted_content === "string" ? { ...i, encrypted_content: Buffer.from(i.encrypted_content).toString("base64") } : i)),
);

type Side = StreamProvider<CallPhases<CallState>, unknown>;
/** The accumulators keep the response's reasoning by position: `reasoning` items (openai), `thinking` blocks (anthropic). */
type Accumulator = { reasoning?: Map<number, unknown>; thinking?: Map<number, unknown> };
const reasoningOf = (a: Accumulator): Map<number, unknown> | undefined => a.reasoning ?? a.thinking;

/**
 * A stream side that keeps the reasoning of a turn's first attempt ("the model reasoned once about
 * this request"): an attempt cut after its reasoning item was done hands that item to the next
 * attempt, which commits it in place of its own.
 */
function keepsCutAttemptsReasoning(runner: KitRunner): KitRunner {
  const side = (runner as unknown as { provider: Side }).provider;
  const { createAccumulator, finished, commitShape } = { createAccumulator: side.createAccumulator.bind(side), finished: side.finished.bind(side), commitShape: side.commitShape.bind(side) };
  let last: Accumulator | undefined;
  let carried: Map<number, unknown> | undefined;
  side.createAccumulator = () => {
    // The cut attempt's whole items only (a thinking block the cut left without its signature is no reasoning to keep).
    const whole = [...(last === undefined ? [] : (reasoningOf(last) ?? []))].filter(([, item]) => (item as { signature?: unknown }).signature !== "");
    if (last !== undefined && !finished(last as never) && whole.length > 0) carried ??= new Map(whole);
    last = createAccumulator() as Accumulator;
    return last as never;
  };
  side.commitShape = (accumulator, answers) => {
    const own = reasoningOf(accumulator as Accumulator);
    if (carried !== undefined && own !== undefined) for (const [index, item] of carried) if (own.has(index)) own.set(index, item);
    carried = undefined;
    return commitShape(accumulator, answers);
  };
  return runner;
}

/**
 * The stream side of before: beside a reasoning item it committed a message as `{ type, role,
 * content: "…" }`, without the `msg_` id (and status, and parts) the stream delivered it with.
 */
function idlessMessages(runner: KitRunner): KitRunner {
  const side = (runner as unknown as { provider: Side }).provider;
  const commitShape = side.commitShape.bind(side);
  side.commitShape = (accumulator, answers) => {
    const shape = commitShape(accumulator, answers);
    const items = shape.assistant as unknown as { type?: string; content?: unknown }[];
    const text = (content: unknown) => (content as { text?: string; refusal?: string }[]).map((p) => p.text ?? p.refusal ?? "").join("");
    return { ...shape, assistant: items.map((i) => (i.type === "message" && Array.isArray(i.content) ? { type: "message", role: "assistant", content: text(i.content) } : i)) as unknown as JsonValue };
  };
  return runner;
}

describe("reasoning items: the end-to-end level rejects stores and stream sides that lose or mix them (provider openai)", () => {
  const planted = (options: Parameters<typeof runEndToEnd>[1]) =>
    runEndToEnd(memory, { deploys: false, provider: "openai", ...CI, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: 0, ...options }).catch((e: unknown) => e);

  it("STREAM-15 a conversation store that keeps only the messages and calls of a committed turn drops its reasoning item", async () => {
    const message = expectReadable(await planted({ conversationStore: dropsReasoning }), CI.seed);
    expect(message).toMatch(/breaks STREAM-15\): .* committed without the reasoning item rs_\w+ that opened the response it committed/);
  }, 600_000);

  it("STREAM-15 a conversation store that re-encodes a reasoning item's encrypted_content", async () => {
    const message = expectReadable(await planted({ conversationStore: altersEncryptedContent }), CI.seed);
    expect(message).toMatch(/breaks STREAM-15\): .* reasoning item rs_\w+ at position 0 is not as the stream delivered it: "encrypted_content"/);
  }, 600_000);

  it("STREAM-15 a stream side that commits a reasoning model's text answer without the message item's id (as @dispatch-once/openai committed it before)", async () => {
    const message = expectReadable(await planted({ runner: idlessMessages }), CI.seed);
    expect(message).toMatch(/breaks STREAM-15\): .* its message at position 1, beside reasoning item rs_\w+ \(request \d+, attempt \d+\), is not the message item msg_\w+ as the stream delivered it: "content", "id", "status" differ/);
  }, 600_000);

});

/**
 * The same stream side on both runner sides. Its request is refused by neither mock in the runs
 * where it fires (a cut attempt's item is well formed: the Messages API's signature vouches for a
 * thinking block's text, not for the response it came from; a refused request fails a turn of a
 * run with faults, which the level accepts when the records tell the truth), so only the oracle's
 * comparison with the committing response sees it. CI's searches: the OpenAI one above, and the
 * Anthropic reference's (e2e.test.ts: seed 20261129), here 30 runs of it.
 */
describe.each(RUNNER_PROVIDERS)("reasoning items: a stream side that mixes a cut attempt's into the committed turn (provider %s)", (provider) => {
  it("STREAM-15 a stream side that commits a cut attempt's reasoning item in place of the committing attempt's", async () => {
    const seed = provider === "openai" ? CI.seed : 20261129;
    const error = await runEndToEnd(memory, { deploys: false, provider, runs: CI.runs, seed, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: 0, runner: keepsCutAttemptsReasoning }).catch((e: unknown) => e);
    const message = expectReadable(error, seed);
    const item = provider === "openai" ? "reasoning item rs_\\w+" : "thinking block \\S+";
    expect(message).toMatch(new RegExp(`breaks STREAM-15\\): .* ${item} at position 0 is another response's \\(request \\d+`));
  }, 600_000);
});
