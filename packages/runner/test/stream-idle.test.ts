import { InvalidArgumentError, type JsonValue } from "@dispatch-once/core";
import { afterEach, describe, expect, it, vi } from "vitest";
import { StreamIncompleteError, TurnFailedError, TurnRunner } from "../src/index.js";
import { openStallSocket } from "./stall-socket.js";
import { payCall, world, type ToyEvent } from "./toy.js";

type Open = (input: JsonValue[], options?: { headers?: Record<string, string>; signal?: AbortSignal }) => Promise<AsyncIterable<ToyEvent>>;

/** The answer to a request after the first: the retry's call, then the follow-up turn's text. */
const retryScript = (n: number, input: JsonValue[]): ToyEvent[] =>
  (input.at(-1) as { role?: string }).role !== "user" ? [{ t: "text", index: 0, text: "Paid." }, { t: "end" }] : [...payCall(`c${n}`, "again"), { t: "end" }];

/**
 * Request 1 streams `events`, then its next read never settles, not even after the abort: what
 * Node 20's fetch does to a read pending when an abort comes after the body arrived.
 */
function stallingOpen(original: Open, events: ToyEvent[], signals: AbortSignal[]): Open {
  let request = 0;
  return async (input, options) => {
    request += 1;
    if (options?.signal !== undefined) signals.push(options.signal);
    if (request > 1) return original(input, options);
    await original(input, options); // counted as a request
    let i = 0;
    return {
      [Symbol.asyncIterator]: () => ({
        next: () => (i < events.length ? Promise.resolve({ done: false as const, value: events[i++]! }) : new Promise<IteratorResult<ToyEvent>>(() => {})),
      }),
    };
  };
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe("STREAM-16 the runner bounds the wait for each next event (toy provider)", () => {
  it("STREAM-16 a read that never settles, even after the abort: send() returns, the request's signal was aborted, the retry commits, paid once", async () => {
    const w = world(retryScript, false, { runner: { streamIdleTimeoutMs: 300 } });
    const signals: AbortSignal[] = [];
    w.provider.open = stallingOpen(w.provider.open.bind(w.provider) as Open, payCall("c1", "first"), signals);
    const result = await w.runner.send("conv-idle", { id: "m1", content: "pay acme" });
    expect(result.turns.map((t) => t.attempts)).toEqual([2, 1]);
    expect(w.performed).toHaveLength(1);
    expect(w.events.find((e) => e.type === "stream_failed")).toMatchObject({ attempt: 1, position: "after_dispatch_before_stop", error: expect.stringContaining("idle for 300 ms") });
    expect(signals[0]!.aborted).toBe(true);
    // A stream read to its end is not aborted.
    expect(signals.slice(1).map((s) => s.aborted)).toEqual([false, false]);
  });

  it("STREAM-16 a stream side that ignores the signal has its abandoned iterator closed (return() asked, never awaited), and send() returns", async () => {
    const w = world(retryScript, false, { runner: { streamIdleTimeoutMs: 300 } });
    const original = w.provider.open.bind(w.provider) as Open;
    let request = 0;
    let closes = 0;
    const open: Open = async (input, options) => {
      request += 1;
      if (request > 1) return original(input, options);
      await original(input, options);
      const events = payCall("c1", "first");
      let i = 0;
      return {
        [Symbol.asyncIterator]: () => ({
          next: () => (i < events.length ? Promise.resolve({ done: false as const, value: events[i++]! }) : new Promise<IteratorResult<ToyEvent>>(() => {})),
          // A close that never settles either: the runner must not wait for it.
          return: () => {
            closes += 1;
            return new Promise<IteratorResult<ToyEvent>>(() => {});
          },
        }),
      };
    };
    w.provider.open = open;
    const result = await w.runner.send("conv-idle-close", { id: "m1", content: "pay acme" });
    expect(result.turns.map((t) => t.attempts)).toEqual([2, 1]);
    expect(closes).toBe(1);
    expect(w.performed).toHaveLength(1);
  });

  it("STREAM-16 an open() that ignores the signal and resolves after the bound fired: the stream it hands over late is closed (return() asked, never awaited), never read", async () => {
    const w = world(retryScript, false, { runner: { streamIdleTimeoutMs: 300 } });
    const original = w.provider.open.bind(w.provider) as Open;
    let request = 0;
    let closes = 0;
    let reads = 0;
    let answer!: () => void;
    const late = new Promise<void>((resolve) => (answer = resolve));
    const open: Open = async (input, options) => {
      request += 1;
      if (request > 1) return original(input, options);
      await late; // the response comes after the bound, and the signal is ignored
      return {
        [Symbol.asyncIterator]: () => ({
          next: () => {
            reads += 1;
            return new Promise<IteratorResult<ToyEvent>>(() => {});
          },
          return: () => {
            closes += 1;
            return new Promise<IteratorResult<ToyEvent>>(() => {});
          },
        }),
      };
    };
    w.provider.open = open;
    const result = await w.runner.send("conv-idle-late-open", { id: "m1", content: "pay acme" });
    expect(result.turns.map((t) => t.attempts)).toEqual([2, 1]);
    expect(closes).toBe(0);
    answer();
    // The close follows the late answer within a few turns of the event loop (no timer is involved).
    for (let i = 0; i < 100 && closes === 0; i++) await new Promise((r) => setTimeout(r, 5));
    expect(closes).toBe(1);
    expect(reads).toBe(0);
    expect(w.performed).toHaveLength(1);
  });

  it("STREAM-16 an open() that never answers (no response headers) is bounded too: the turn fails with idleMs once retries run out", async () => {
    const w = world(retryScript, false, { runner: { streamIdleTimeoutMs: 300, retry: { attempts: 2, backoffMs: () => 1 } } });
    w.provider.open = () => new Promise(() => {});
    const error = await w.runner.send("conv-idle-open", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TurnFailedError);
    expect((error as TurnFailedError).record).toMatchObject({ position: "before_any_call", attempts: 2, error: { code: "stream_incomplete" } });
    expect((error as TurnFailedError).record.error.message).toBe("the stream was idle for 300 ms (streamIdleTimeoutMs) after 0 events without end; the request was aborted");
  });

  it("STREAM-16 every idle timer the runner sets is cleared when the stream finishes", async () => {
    // A bound no other timer of the test uses, to tell the runner's idle timers apart.
    const BOUND = 123_457;
    const set = vi.spyOn(globalThis, "setTimeout");
    const cleared = vi.spyOn(globalThis, "clearTimeout");
    const w = world(retryScript, false, { runner: { streamIdleTimeoutMs: BOUND } });
    await w.runner.send("conv-timers", { id: "m1", content: "pay acme" });
    const idleTimers = set.mock.results.filter((_r, i) => set.mock.calls[i]![1] === BOUND).map((r) => r.value as unknown);
    expect(idleTimers.length).toBeGreaterThan(0);
    const clearedTimers = new Set(cleared.mock.calls.map((c) => c[0] as unknown));
    expect(idleTimers.filter((t) => !clearedTimers.has(t))).toEqual([]);
  });

  it("STREAM-16 every idle timer is cleared on the path that goes idle too (the one that fired included: clearing it is harmless)", async () => {
    const set = vi.spyOn(globalThis, "setTimeout");
    const cleared = vi.spyOn(globalThis, "clearTimeout");
    const w = world(retryScript, false, { runner: { streamIdleTimeoutMs: 301 } });
    w.provider.open = stallingOpen(w.provider.open.bind(w.provider) as Open, payCall("c1", "first"), []);
    await w.runner.send("conv-timers-idle", { id: "m1", content: "pay acme" });
    const idleTimers = set.mock.results.filter((_r, i) => set.mock.calls[i]![1] === 301).map((r) => r.value as unknown);
    const clearedTimers = new Set(cleared.mock.calls.map((c) => c[0] as unknown));
    expect(idleTimers.length).toBeGreaterThan(1);
    expect(idleTimers.filter((t) => !clearedTimers.has(t))).toEqual([]);
  });

  it("STREAM-16 one idle timer per attempt, re-armed at each wait (not one per stream event)", async () => {
    // A bound no other timer of the test uses, to tell the runner's idle timers apart.
    const BOUND = 123_459;
    const set = vi.spyOn(globalThis, "setTimeout");
    const w = world(retryScript, false, { runner: { streamIdleTimeoutMs: BOUND } });
    const result = await w.runner.send("conv-one-timer", { id: "m1", content: "pay acme" });
    const attempts = result.turns.reduce((n, t) => n + t.attempts, 0);
    expect(attempts).toBe(2);
    expect(set.mock.calls.filter((c) => c[1] === BOUND)).toHaveLength(attempts);
  });

  it("STREAM-16 the bound is per wait: a stream that takes longer than the bound in all, each event sooner than it, is read to its end", async () => {
    // Each gap's timer is set after the bound's re-arming and is shorter, so it always fires first:
    // the order does not depend on the host's speed.
    const GAP = 100;
    const w = world(retryScript, false, { runner: { streamIdleTimeoutMs: 250 } });
    const original = w.provider.open.bind(w.provider) as Open;
    let request = 0;
    let slowEvents = 0;
    const open: Open = async (input, options) => {
      request += 1;
      const stream = await original(input, options);
      if (request > 1) return stream;
      return {
        async *[Symbol.asyncIterator]() {
          for await (const event of stream) {
            await new Promise((resolve) => setTimeout(resolve, GAP));
            slowEvents += 1;
            yield event;
          }
        },
      };
    };
    w.provider.open = open;
    const result = await w.runner.send("conv-slow", { id: "m1", content: "pay acme" });
    // The first request's events (the call and the end) came GAP ms apart: longer than the bound in all.
    expect(slowEvents * GAP).toBeGreaterThanOrEqual(2 * 250);
    expect(result.turns.map((t) => t.attempts)).toEqual([1, 1]);
    expect(w.events.filter((e) => e.type === "stream_failed")).toEqual([]);
    expect(w.performed).toHaveLength(1);
  });

  it("STREAM-16 a stall of the runner's own process is not the stream's: an event already received when the bound ran out is read, not an idle failure", async () => {
    // The next event is in the socket (written before the block), and then the event loop is
    // blocked past the bound, as a starved process on a loaded host is: the bound's timer is due
    // before that turn's I/O is read. The stream was never idle; the attempt must go on.
    const IDLE_MS = 100;
    const socket = await openStallSocket();
    try {
      const w = world(retryScript, false, { runner: { streamIdleTimeoutMs: IDLE_MS } });
      const original = w.provider.open.bind(w.provider) as Open;
      let request = 0;
      const open: Open = async (input, options) => {
        request += 1;
        const stream = await original(input, options);
        if (request > 1) return stream;
        // The first request's events as the script gives them, without the toy's 5 ms timer
        // before each: each byte is written the moment the runner starts waiting for its event.
        const events = retryScript(1, input);
        return {
          async *[Symbol.asyncIterator]() {
            for (const event of events) {
              await socket.arrivesDuringStall(3 * IDLE_MS);
              yield event;
            }
          },
        };
      };
      w.provider.open = open;
      const result = await w.runner.send("conv-own-stall", { id: "m1", content: "pay acme" });
      expect(socket.blocks()).toBeGreaterThan(0);
      expect(w.events.filter((e) => e.type === "stream_failed")).toEqual([]);
      expect(result.turns.map((t) => t.attempts)).toEqual([1, 1]);
      expect(w.performed).toHaveLength(1);
    } finally {
      await socket.close();
    }
  });

  it("STREAM-16 a bound that is not a positive number of ms (or Infinity) is refused with InvalidArgumentError", () => {
    const { provider, dispatcher, store } = world(retryScript);
    for (const bad of [0, -5, Number.NaN, 2 ** 31, "300", null]) {
      expect(() => new TurnRunner(provider, { dispatcher, store, allowVolatileConversationStore: true, streamIdleTimeoutMs: bad as number })).toThrow(
        expect.objectContaining({ code: "invalid_argument", field: "options.streamIdleTimeoutMs" }) as Error,
      );
    }
    expect(() => new TurnRunner(provider, { dispatcher, store, allowVolatileConversationStore: true, streamIdleTimeoutMs: Infinity })).not.toThrow();
    expect(new InvalidArgumentError("x", "y")).toBeInstanceOf(Error);
    expect(new StreamIncompleteError(1, "end", undefined, undefined, 5).idleMs).toBe(5);
  });
});
