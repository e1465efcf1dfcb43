/**
 * A stream side's event stream with the provider's in-stream errors given back as events.
 *
 * Both SDKs throw an error the provider reports inside a stream (the Messages API's `error` event, a
 * Chat Completions chunk carrying `error`) as an `APIError` without a status. Thrown, it would reach
 * the failed-turn record as the SDK's bare error; given back as the event it was, the stream side's
 * accumulator reads what the provider said and the runner fails the stream as `stream_incomplete`
 * carrying it (STREAM-12). `asEvent` says which throws are such an error (`undefined` for every other:
 * a cut connection or an abort passes through as thrown). After one, the stream ends; `return()`
 * still reaches the SDK's iterator, which lets its connection go (STREAM-16).
 *
 * @example return errorsGivenBack(await client.messages.create({ ...body, stream: true }), (thrown) => errorEventOf(thrown));
 */
export function errorsGivenBack<E>(stream: AsyncIterable<E>, asEvent: (thrown: unknown) => E | undefined): AsyncIterable<E> {
  return {
    [Symbol.asyncIterator](): AsyncIterator<E> {
      const inner = stream[Symbol.asyncIterator]();
      let ended = false;
      // One handler per stream, not per event: the hot path adds only the rejection branch.
      const onThrow = (thrown: unknown): IteratorResult<E> => {
        const event = asEvent(thrown);
        if (event === undefined) throw thrown;
        ended = true;
        return { done: false, value: event };
      };
      return {
        next(): Promise<IteratorResult<E>> {
          if (ended) return Promise.resolve({ done: true, value: undefined });
          return inner.next().then(undefined, onThrow);
        },
        async return(value?: unknown): Promise<IteratorResult<E>> {
          ended = true;
          return (await inner.return?.(value)) ?? { done: true, value: undefined };
        },
      };
    },
  };
}

/**
 * The body of an error the SDK threw for the provider's in-stream error: an `APIError` (it has a
 * `status` member) whose status is undefined, with an object `error`. A cut connection or an abort
 * is not one (no status member, or no body).
 */
export function inStreamErrorBody(thrown: unknown): Record<string, unknown> | undefined {
  if (!(thrown instanceof Error) || !("status" in thrown) || thrown.status !== undefined) return undefined;
  const body: unknown = (thrown as { error?: unknown }).error;
  return typeof body === "object" && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : undefined;
}
