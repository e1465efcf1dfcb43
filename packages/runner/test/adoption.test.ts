import { describe, expect, it } from "vitest";
import { InvalidArgumentError, MemoryConversationStore, type DispatchLogger } from "@dispatch-once/core";
import { MAX_LEASE_MS } from "@dispatch-once/core/internal";
import { TurnFailedError, TurnRunner, type RunnerEvent } from "../src/index.js";
import { ToyProvider, payCall, world, type ToyEvent } from "./toy.js";

/** Findings of the adoption trial, checked on the provider-free runner. */
const failed = async (promise: Promise<unknown>): Promise<TurnFailedError> => {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(TurnFailedError);
  return error as TurnFailedError;
};

describe("TurnFailedError.replayed and record.retryable (TURN-12, RECORD-5)", () => {
  it("TURN-12 a turn that fails in this send is not replayed; a stored failure only read back is", async () => {
    const { runner, provider } = world((n) => (n === 1 ? ["cut"] : [{ t: "text", index: 0, text: "Hi." }, { t: "end" }]), false, {
      runner: { retry: { attempts: 1, backoffMs: () => 1 } },
    });
    const first = await failed(runner.send("conv-r", { id: "m1", content: "x" }));
    expect(first.replayed).toBe(false);
    expect(first.record.retryable).toBe(true);
    // A later message is bound at the failed turn's index and answered: m1 can never reopen.
    await runner.send("conv-r", { id: "m2", content: "y" });
    const again = await failed(runner.send("conv-r", { id: "m1", content: "x" }));
    expect(again.replayed).toBe(true);
    expect(provider.requests).toHaveLength(2);
  });

  it("TURN-12 a failed message re-sent after a later message was bound is not retryable: the re-send runs nothing", async () => {
    const { runner, provider } = world((n) => (n === 1 ? ["cut"] : [{ t: "text", index: 0, text: "Hi." }, { t: "end" }]), false, {
      runner: { retry: { attempts: 1, backoffMs: () => 1 } },
    });
    await failed(runner.send("conv-r", { id: "m1", content: "x" }));
    await runner.send("conv-r", { id: "m2", content: "y" });
    const again = await failed(runner.send("conv-r", { id: "m1", content: "x" }));
    expect(again.record.retryable).toBe(false);
    // Re-sending as told changes nothing: the same stored failure, no model request.
    const third = await failed(runner.send("conv-r", { id: "m1", content: "x" }));
    expect(third.record.retryable).toBe(false);
    expect(provider.requests).toHaveLength(2);
  });

  it("TURN-17 the store's listing says reopenable as the runner acts: the stored record keeps retryable: true, the re-send after a later message returns the stored failure", async () => {
    const { runner, provider, store } = world((n) => (n === 1 ? ["cut"] : [{ t: "text", index: 0, text: "Hi." }, { t: "end" }]), false, {
      runner: { retry: { attempts: 1, backoffMs: () => 1 } },
    });
    const listed = async () => (await store.listFailedTurns!({ conversationId: "conv-r" })).turns.map((t) => [t.messageId, t.reopenable, (t.failure as { retryable?: unknown }).retryable]);
    await failed(runner.send("conv-r", { id: "m1", content: "x" }));
    expect(await listed()).toEqual([["m1", true, true]]);
    // m2 is bound at m1's index and answered: the record stored at m1's failure still says retryable.
    await runner.send("conv-r", { id: "m2", content: "y" });
    expect(await listed()).toEqual([["m1", false, true]]);
    const again = await failed(runner.send("conv-r", { id: "m1", content: "x" }));
    expect([again.replayed, again.record.retryable]).toEqual([true, false]);
    expect(provider.requests).toHaveLength(2);
    expect(await listed()).toEqual([["m1", false, true]]);
  });

  it("RECORD-5 a permanent 4xx from the model API is not retryable: a re-send sends the same conversation again", async () => {
    const refused = Object.assign(new Error("400 invalid_request_error: messages.0.content: bad"), { status: 400 });
    const { runner, provider } = world(() => [], false);
    provider.open = async (input) => {
      provider.requests.push(input);
      throw refused;
    };
    const error = await failed(runner.send("conv-4xx", { id: "m1", content: "x" }));
    expect(error.record.position).toBe("before_any_call");
    expect(error.record.retryable).toBe(false);
    expect(provider.requests).toHaveLength(1);
  });

  it("RECORD-5 a 429 or a 5xx stays retryable", async () => {
    for (const status of [429, 500]) {
      const { runner, provider } = world(() => [], false);
      provider.open = async () => {
        throw Object.assign(new Error(`${status}`), { status });
      };
      const error = await failed(runner.send("conv-5xx", { id: `m${status}`, content: "x" }));
      expect(error.record.retryable).toBe(true);
    }
  });
});

describe("event callbacks never change the protocol (OTEL-3)", () => {
  it("OTEL-3 an onEvent that throws on every event: the turn still commits, the payment is made once, each error is logged", async () => {
    const warnings: { message: string; fields?: Record<string, unknown> }[] = [];
    const logger: DispatchLogger = { warn: (message, fields) => warnings.push({ message, ...(fields !== undefined ? { fields } : {}) }) };
    const { runner, performed, store } = world(
      (_n, input) =>
        (input.at(-1) as { role?: string }).role !== "user" ? [{ t: "text", index: 0, text: "Paid." }, { t: "end" }] : [...payCall("c1", "m"), { t: "end" }],
      false,
      {
        runner: {
          logger,
          onEvent: () => {
            throw new Error("ui is broken");
          },
        },
      },
    );
    const result = await runner.send("conv-ev", { id: "m1", content: "pay" });
    expect(result.status).toBe("answered");
    expect(performed).toHaveLength(1);
    expect((await store.message("conv-ev", "m1"))?.state).toBe("answered");
    expect(warnings.length).toBeGreaterThan(0);
    expect(warnings[0]).toMatchObject({ message: expect.stringContaining("onEvent"), fields: { type: "attempt_started", error: "Error: ui is broken" } });
  });

  it("OTEL-3 onEvent must be a function: refused when the runner is built", () => {
    const provider = new ToyProvider(() => [], async () => undefined);
    const { dispatcher } = world(() => []);
    const store = new MemoryConversationStore();
    const build = (onEvent: unknown) =>
      new TurnRunner(provider, { dispatcher, store, allowVolatileConversationStore: true, onEvent: onEvent as (e: RunnerEvent) => void });
    expect(() => build("log")).toThrow(expect.objectContaining({ code: "invalid_argument", field: "options.onEvent" }));
    expect(() => build(undefined)).not.toThrow();
  });
});

describe("options and message content are checked before anything is stored or sent (KEY-2)", () => {
  const provider = () => new ToyProvider(() => [{ t: "end" } as ToyEvent], async () => undefined);
  const base = () => {
    const { dispatcher } = world(() => []);
    return { dispatcher, store: new MemoryConversationStore(), allowVolatileConversationStore: true };
  };
  const bad: [string, Record<string, unknown>][] = [
    ["options.maxTurns", { maxTurns: 0 }],
    ["options.maxTurns", { maxTurns: -1 }],
    ["options.maxTurns", { maxTurns: 1.5 }],
    ["options.maxTurns", { maxTurns: "8" }],
    ["options.retry", { retry: 3 }],
    ["options.retry.attempts", { retry: { attempts: 0 } }],
    ["options.retry.attempts", { retry: { attempts: -1 } }],
    ["options.retry.attempts", { retry: { attempts: Number.NaN } }],
    ["options.retry.backoffMs", { retry: { backoffMs: 10 } }],
    ["options.retry.shouldRetry", { retry: { shouldRetry: true } }],
    ["options.busyWaitMs", { busyWaitMs: -5 }],
    ["options.busyWaitMs", { busyWaitMs: "soon" }],
    ["options.pollMs", { pollMs: 0 }],
    ["options.pollMs", { pollMs: Number.POSITIVE_INFINITY }],
    ["options.turnLeaseMs", { turnLeaseMs: 0 }],
    ["options.turnLeaseMs", { turnLeaseMs: "30s" }],
    ["options.turnLeaseMs", { turnLeaseMs: MAX_LEASE_MS + 1 }],
    ["options.owner", { owner: "" }],
    ["options.owner", { owner: 7 }],
    ["options.requestHeaders", { requestHeaders: { "x-a": "b" } }],
    ["options.logger", { logger: console.warn }],
    ["options.logger", { logger: { info: () => undefined } }],
    ["options.allowVolatileConversationStore", { allowVolatileConversationStore: "yes" }],
    // Adoption trial: an object that is not a dispatcher or a store was accepted here and failed
    // at send() with a bare TypeError, after the message was bound and left in progress.
    ["options.dispatcher", { dispatcher: {} }],
    ["options.dispatcher", { dispatcher: { turn: "x" } }],
    ["options.store", { store: {} }],
    ["options.store", { store: Object.assign(Object.create(new MemoryConversationStore()) as object, { turnsOf: undefined }) }],
  ];
  it.each(bad)("TURN-2 refuses %s = %j with InvalidArgumentError naming the field, at construction", (field, extra) => {
    let error: unknown;
    try {
      new TurnRunner(provider(), { ...base(), ...extra } as never);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ code: "invalid_argument", field });
  });

  it("TURN-2 accepts every option at a valid value", () => {
    expect(
      () =>
        new TurnRunner(provider(), {
          ...base(),
          maxTurns: 1,
          retry: { attempts: 1, backoffMs: () => 0, shouldRetry: () => false },
          busyWaitMs: 0,
          pollMs: 1,
          turnLeaseMs: MAX_LEASE_MS,
          owner: "w1",
          requestHeaders: () => ({}),
          logger: console,
          onEvent: () => undefined,
        }),
    ).not.toThrow();
  });

  it("TURN-2 a message without content is refused before it is stored or sent to the model", async () => {
    const { runner, provider: toy, store } = world(() => [{ t: "end" }]);
    toy.checkContent = (content: unknown) => {
      if (typeof content !== "string" || content.length === 0) throw new InvalidArgumentError("message.content", "must be a non-empty string");
    };
    for (const content of [undefined, "", 5]) {
      await expect(runner.send("conv-c", { id: "m1", content: content as string })).rejects.toMatchObject({ code: "invalid_argument", field: "message.content" });
    }
    expect(toy.requests).toHaveLength(0);
    expect(await store.message("conv-c", "m1")).toBeUndefined();
  });
});
