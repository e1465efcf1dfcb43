import { afterEach, describe, expect, it } from "vitest";
import { THREAD_MODES, cutRequests, expectRequestsOfMode, paymentsApp, providerPerTest, toolResultsOf } from "./tool-runner-fixtures.js";

/**
 * The incident with the SDK's own tool runner, unwrapped: a request of the loop fails after an
 * earlier iteration's payment ran, the app re-runs the loop from the user's message, and the
 * model emits the same payment again with a new toolu_ id.
 */
const provider = providerPerTest();

describe.each(THREAD_MODES)("the SDK's toolRunner without Dispatch-Once (the baseline the wrapper must beat), %s", (name, params) => {
  // Threaded, the re-run is a new thread (the SDK never continues from a cut reply) and the model
  // sees the same conversation: the same payment again.
  afterEach(() => expectRequestsOfMode(provider(), [name, params]));

  it("ATR-1 a stream cut in iteration 2 and a re-run of the loop from the user's message pays twice", async () => {
    const { client, sendPayment, effects } = await paymentsApp(provider());
    cutRequests(provider(), [2]); // iteration 2 of the first run: the payment of iteration 1 has run
    const errors: unknown[] = [];
    let messages;
    for (let attempt = 0; attempt < 3 && messages === undefined; attempt++) {
      const runner = client.beta.messages.toolRunner({
        model: "claude-test",
        max_tokens: 1024,
        stream: true,
        ...params,
        messages: [{ role: "user", content: "pay acme" }],
        tools: [sendPayment],
      });
      try {
        await runner.runUntilDone();
        messages = runner.params.messages;
      } catch (error) {
        errors.push(error);
      }
    }
    expect(errors).toHaveLength(1);
    expect(messages).toBeDefined();
    // The app was told one payment (the kept run's one tool result) ...
    const results = toolResultsOf(messages!);
    expect(results).toHaveLength(1);
    expect(results[0]!.isError).toBe(false);
    // ... and two were made: the incident.
    const made = effects();
    expect(made).toHaveLength(2);
    expect(made.every((e) => e.idempotencyKey === undefined || e.idempotencyKey === null)).toBe(true);
  });

  it("ATR-1 a cut on iteration 3, after iteration 1 paid acme and iteration 2 paid alice: the re-run pays both again", async () => {
    const { client, sendPayment, effects } = await paymentsApp(provider());
    cutRequests(provider(), [3]);
    const run = () =>
      client.beta.messages
        .toolRunner({ model: "claude-test", max_tokens: 1024, stream: true, ...params, messages: [{ role: "user", content: "pay acme then alice" }], tools: [sendPayment] })
        .runUntilDone();
    await expect(run()).rejects.toThrow(/terminated/);
    await run();
    expect(effects().map((e) => e.idempotencyKey ?? null)).toEqual([null, null, null, null]);
  });
});
