import { describeValue, InvalidArgumentError } from "@dispatch-once/core";
import { MAX_TIMER_MS, unknownOptionMessage, unknownOptionName, type OptionNames } from "@dispatch-once/core/internal";

/** The runner's default bound (STREAM-16): inside the 90-300 s that deployments give a silent stream. */
const DEFAULT_IDLE_MS = 300_000;

export interface BoundedFetchOptions {
  /**
   * The longest wait, in milliseconds, for the response's headers and then for each next chunk of
   * its body while the reader asks for one (spec STREAM-16). Past it the request is aborted and the
   * body errors with a `TimeoutError` `DOMException`: the AI SDK's `streamText` ends the request
   * without a finish part, a failed attempt the app sends again with the same messages (AISDK-6,
   * AISDK-13); the Anthropic SDK's `toolRunner` rejects `runUntilDone()`, and the app re-runs the
   * loop (ATR-1, ATR-11). A reader that is busy (a tool running) is not timed. `Infinity` turns the
   * bound off.
   * @default 300_000
   * @example { idleMs: 120_000 }
   */
  idleMs?: number;
  /**
   * The fetch to wrap.
   * @default globalThis.fetch
   * @example { fetch: myInstrumentedFetch }
   */
  fetch?: typeof fetch;
}

const OPTION_NAMES: OptionNames<BoundedFetchOptions> = { idleMs: true, fetch: true };

/**
 * A fetch for the model provider of a loop that Dispatch-Once's runner does not own, so that no
 * `streamIdleTimeoutMs` bounds it: the AI SDK's (`createOpenAI({ fetch: boundedFetch() })`,
 * `createAnthropic({ fetch: boundedFetch() })`, AISDK-13) and the Anthropic SDK's tool runner
 * (`new Anthropic({ fetch: boundedFetch() })`, ATR-11). It ends the model's stream in the two cases
 * where, on Node, nothing else does:
 *
 * - **The stream goes silent** (a NAT or proxy dropped the connection without a FIN; an upstream
 *   stall): the wait for the headers and for each next chunk is bounded by `idleMs` (STREAM-16).
 *   `streamText`'s own `timeout.chunkMs` does not cover the wait before the first chunk, and it
 *   also runs while a tool executes, so it cuts a slow payment's step; the Anthropic SDK's
 *   `timeout` is cleared once the headers arrive, so it does not time the body at all.
 * - **The request is aborted after the response fully arrived** but before it was read to its end:
 *   Node 20's fetch (undici 6) then leaves the body's pending read unsettled, and `fullStream`
 *   never ends. The body here errors at the abort itself.
 *
 * The wrapped body never waits on a read it has given up on: a read that is pending at the bound
 * or at the abort is left behind, and the request's connection is aborted.
 */
export function boundedFetch(options: BoundedFetchOptions = {}): typeof fetch {
  if (typeof options !== "object" || options === null) throw new InvalidArgumentError("options", `must be an object { idleMs?, fetch? }, got ${describeValue(options)}`);
  const unknown = unknownOptionName(options, OPTION_NAMES);
  if (unknown !== undefined) throw new InvalidArgumentError(`options.${unknown}`, unknownOptionMessage("boundedFetch", OPTION_NAMES));
  const idleMs = options.idleMs ?? DEFAULT_IDLE_MS;
  if (typeof idleMs !== "number" || !(idleMs === Infinity || (idleMs > 0 && idleMs <= MAX_TIMER_MS))) {
    throw new InvalidArgumentError("options.idleMs", `must be a number of milliseconds above 0 and at most ${MAX_TIMER_MS}, or Infinity, got ${describeValue(idleMs)}`);
  }
  const inner = options.fetch ?? globalThis.fetch;
  if (typeof inner !== "function") throw new InvalidArgumentError("options.fetch", `must be a fetch function, got ${describeValue(inner)}`);
  return (input, init) => boundedRequest(inner, idleMs, input, init);
}

function idleError(idleMs: number): DOMException {
  return new DOMException(`the model's stream was idle for ${idleMs} ms (STREAM-16)`, "TimeoutError");
}

async function boundedRequest(inner: typeof fetch, idleMs: number, input: Parameters<typeof fetch>[0], init: RequestInit | undefined): Promise<Response> {
  const outer = init?.signal ?? undefined;
  if (outer?.aborted) throw outer.reason;
  // Our own controller: aborted by the caller's signal, by the idle bound, or when the body ends early.
  const request = new AbortController();
  // What the caller's abort does: abort the request, and once the body is handed out, error it too.
  let onOuterAbort = () => request.abort(outer?.reason);
  const listener = () => onOuterAbort();
  outer?.addEventListener("abort", listener, { once: true });
  const detach = () => outer?.removeEventListener("abort", listener);

  let timer: ReturnType<typeof setTimeout> | undefined;
  const disarm = () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
  };
  const arm = (onIdle: () => void) => {
    if (idleMs === Infinity) return;
    // Judged after the poll phase, as withDeadline does: a timer due during a stall of this
    // process (a loaded host) runs before that turn's I/O is read, when the answer may be
    // waiting already. A wait that settled in that poll phase disarmed this timer.
    const armed = setTimeout(
      () =>
        setImmediate(() => {
          if (timer === armed) onIdle();
        }),
      idleMs,
    );
    timer = armed;
  };

  let response: Response;
  try {
    // Not `await inner(...)` alone: a fetch that ignores the abort must not hold the caller.
    response = await new Promise<Response>((resolve, reject) => {
      arm(() => {
        const error = idleError(idleMs);
        request.abort(error);
        reject(error);
      });
      inner(input, { ...init, signal: request.signal }).then(resolve, reject);
    });
  } catch (error) {
    detach();
    throw error;
  } finally {
    disarm();
  }
  if (response.body === null) {
    detach();
    return response;
  }

  const reader = response.body.getReader();
  let finished = false;
  let fail: (error: unknown) => void = () => {};
  const body = new ReadableStream<Uint8Array>(
    {
      start(controller) {
        fail = (error) => {
          if (finished) return;
          finished = true;
          disarm();
          detach();
          controller.error(error);
          request.abort(error);
          // Not awaited: a read pending at an abort may never settle (undici 6).
          reader.cancel(error).catch(() => {});
        };
        onOuterAbort = () => fail(outer?.reason);
        if (outer?.aborted) fail(outer.reason);
      },
      pull(controller) {
        return new Promise<void>((resolve) => {
          arm(() => {
            fail(idleError(idleMs));
            resolve();
          });
          reader.read().then(
            ({ done, value }) => {
              if (finished) return resolve();
              disarm();
              if (done) {
                finished = true;
                detach();
                controller.close();
              } else controller.enqueue(value);
              resolve();
            },
            (error: unknown) => {
              fail(error);
              resolve();
            },
          );
        });
      },
      cancel(reason) {
        if (finished) return;
        finished = true;
        disarm();
        detach();
        request.abort(reason);
        reader.cancel(reason).catch(() => {});
      },
    },
    // Pulled only when the reader asks: the bound times the network, not a busy reader.
    { highWaterMark: 0 },
  );
  return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
}
