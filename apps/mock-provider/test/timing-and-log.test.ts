import { describe, expect, it } from "vitest";
import { scriptFromPlans, say, startMockProvider, toolUse, turn } from "../src/index.js";
import { body, payment, setup as setupProvider } from "./helpers.js";

const plans = scriptFromPlans({
  "pay acme": turn(say("Paying acme now."), toolUse("send_payment", payment)),
});
const setup: typeof setupProvider = (options = {}, clientOptions = {}) => setupProvider({ script: plans, ...options }, clientOptions);

// Lower bounds only: a delay may grow on a loaded machine, it must never shrink. (Node timers can
// fire up to 1 ms early, hence the 2 ms slack.)
const SLACK = 2;

describe("delays", () => {
  it("holds message_stop back by the chapter's 240 ms after the tool call completed", async () => {
    const { provider, client } = await setup({ timing: { beforeMessageStopMs: 240 } });
    const stream = client.messages.stream(body("pay acme"));
    const order: string[] = [];
    stream.on("contentBlock", (b) => {
      if (b.type === "tool_use") {
        order.push("tool_use complete");
      }
    });
    stream.on("streamEvent", (e) => {
      if (e.type === "message_stop") {
        order.push("message_stop");
      }
    });
    await stream.finalMessage();
    expect(order).toEqual(["tool_use complete", "message_stop"]);
    // Measured where the delay is made: client-side clocks share this process's event loop with the server.
    const wire = provider.requests[0]!.events;
    const stop = wire.find((e) => e.type === "message_stop")!;
    const delta = wire.find((e) => e.type === "message_delta")!;
    expect(stop.atMs - delta.atMs).toBeGreaterThanOrEqual(240 - SLACK);
  });

  it("adds afterBlockStopMs after every content_block_stop and betweenEventsMs before every event", async () => {
    const { provider, client } = await setup();
    provider.faults.enqueue({ kind: "timing", timing: { afterBlockStopMs: 50, betweenEventsMs: 5 } });
    await client.messages.stream(body("pay acme")).finalMessage();
    const wire = provider.requests[0]!.events;
    wire.forEach((event, i) => {
      if (i === 0) return;
      const gap = event.atMs - wire[i - 1]!.atMs;
      const expected = 5 + (wire[i - 1]!.type === "content_block_stop" ? 50 : 0);
      expect(gap).toBeGreaterThanOrEqual(expected - SLACK);
    });
    expect(provider.requests[0]!.fault).toEqual({ kind: "timing", timing: { afterBlockStopMs: 50, betweenEventsMs: 5 } });
  });
});

describe("request log", () => {
  it("records body, headers, numbers, attempts, fault, events sent and how each response ended", async () => {
    const { provider, client } = await setup();
    provider.faults.enqueue({ kind: "reset", at: { afterToolUseStop: 0 } });
    await client.messages.stream(body("pay acme")).finalMessage().catch(() => undefined);
    await client.messages.stream(body("pay acme")).finalMessage();
    await client.messages.create(body("pay acme"));

    const [first, second, third] = provider.requests;
    expect(first).toMatchObject({
      requestNumber: 1,
      attempt: 1,
      method: "POST",
      path: "/v1/messages",
      stream: true,
      fault: { kind: "reset", at: { afterToolUseStop: 0 } },
      faultSource: "queue",
      faultFired: true,
      outcome: "reset",
      status: 200,
    });
    expect(first!.body).toMatchObject({ ...body("pay acme"), stream: true });
    expect(first!.headers.authorization).toBe("Bearer sk-test");
    expect(first!.headers["anthropic-version"]).toBeTruthy();
    expect(first!.turn).toEqual(turn(say("Paying acme now."), toolUse("send_payment", payment)));
    expect(first!.events.every((e, i) => e.index === i && e.requestNumber === 1)).toBe(true);
    expect(second).toMatchObject({ requestNumber: 2, attempt: 2, outcome: "complete", faultFired: false });
    expect(second!.fault).toBeUndefined();
    expect(second!.events.at(-1)!.type).toBe("message_stop");
    // stream:true and stream:false bodies are the same model input: the same attempt counter.
    expect(third).toMatchObject({ requestNumber: 3, attempt: 3, stream: false, outcome: "complete" });
    expect(first!.bodyHash).toBe(third!.bodyHash);
    expect(new Set(provider.requests.map((r) => r.toolUses[0]!.id)).size).toBe(3);

    const idsBefore = provider.requests.map((r) => r.toolUses[0]!.id);
    provider.clearRequests();
    await client.messages.create(body("pay acme"));
    expect(provider.requests.map((r) => [r.requestNumber, r.attempt])).toEqual([[1, 1]]);
    // Attempt numbers restart, ids stay fresh.
    expect(idsBefore).not.toContain(provider.requests[0]!.toolUses[0]!.id);
  });

  it("keeps at most logLimit requests", async () => {
    const { provider, client } = await setup({ logLimit: 2 });
    for (let i = 0; i < 3; i++) await client.messages.create(body("pay acme"));
    expect(provider.requests.map((r) => r.requestNumber)).toEqual([2, 3]);
  });

  it("counts attempts for at most attemptsLimit bodies, forgetting the least recently seen", async () => {
    const { provider, client } = await setup({ attemptsLimit: 2 });
    // Three different bodies (only max_tokens differs).
    const maxTokens: Record<string, number> = { acme: 101, globex: 102, initech: 103 };
    const send = async (text: string) => {
      await client.messages.create(body("pay acme", { max_tokens: maxTokens[text.slice(4)]! }));
      return provider.requests.at(-1)!.attempt;
    };
    expect(await send("pay acme")).toBe(1);
    expect(await send("pay globex")).toBe(1);
    // Seen again within the window: a retry.
    expect(await send("pay acme")).toBe(2);
    expect(await send("pay initech")).toBe(1);
    // globex was the least recently seen body when initech came: forgotten; acme was kept.
    expect(await send("pay globex")).toBe(1);
    expect(await send("pay initech")).toBe(2);
    // acme went when globex came back (the window holds initech and globex).
    expect(await send("pay acme")).toBe(1);
  });

  it("refuses an attemptsLimit that is not a positive integer", async () => {
    await expect(setup({ attemptsLimit: 0 })).rejects.toMatchObject({ code: "invalid_option" });
  });

  it("keeps idle connections open for keepAliveTimeoutMs and announces it in Keep-Alive; refuses a value outside 1000..3600000", async () => {
    const keepAliveOf = async (options: { keepAliveTimeoutMs?: number }) => {
      const { client } = await setup(options);
      const { response } = await client.messages.create(body("pay acme")).withResponse();
      return response.headers.get("keep-alive");
    };
    expect(await keepAliveOf({})).toBe("timeout=5");
    expect(await keepAliveOf({ keepAliveTimeoutMs: 65_000 })).toBe("timeout=65");
    for (const bad of [0, 999, 1.5, 3_600_001]) {
      await expect(setup({ keepAliveTimeoutMs: bad }), String(bad)).rejects.toMatchObject({ code: "invalid_option" });
    }
  });

  it("logs invalid requests with the API's 400 and does not spend a queued fault on them", async () => {
    const { provider, client } = await setup();
    provider.faults.enqueue({ kind: "reset", at: { beforeMessageStop: true } });
    const bad = await client.messages.create({ ...body("pay acme"), max_tokens: undefined as never }).catch((e) => e);
    expect(bad.status).toBe(400);
    expect(bad.error).toMatchObject({ type: "error", error: { type: "invalid_request_error", message: "max_tokens: Field required" } });
    expect(provider.requests[0]).toMatchObject({ outcome: "invalid_request", status: 400, error: "max_tokens: Field required" });
    expect(provider.faults.pending).toHaveLength(1);
  });

  it("onEvent and waitForEvent report each event once it was handed to the socket", async () => {
    const { provider, client } = await setup();
    const seen: string[] = [];
    const off = provider.onEvent((e) => seen.push(`${e.requestNumber}:${e.type}`));
    const stopped = provider.waitForEvent((e) => e.type === "content_block_stop" && (e.data as { index: number }).index === 1);
    await client.messages.stream(body("pay acme")).finalMessage();
    const event = await stopped;
    expect(event).toMatchObject({ requestNumber: 1, type: "content_block_stop" });
    expect(seen).toEqual(provider.requests[0]!.events.map((e) => `1:${e.type}`));
    off();
    await client.messages.stream(body("pay acme")).finalMessage();
    expect(seen).toHaveLength(provider.requests[0]!.events.length);
    // Already-sent events satisfy a later wait too.
    await expect(provider.waitForEvent((e) => e.requestNumber === 2 && e.type === "message_stop")).resolves.toMatchObject({ index: provider.requests[1]!.events.length - 1 });
    await expect(provider.waitForEnd(2)).resolves.toMatchObject({ outcome: "complete" });
  });
});

describe("startMockProvider options it does not have (invalid_option)", () => {
  it("a misspelt option (sead) is refused naming it, as is an options value that is not an object: ignored, a test's seed would silently be the default", async () => {
    const started = async (options: unknown) => {
      try {
        const provider = await startMockProvider(options as never);
        await provider.close();
        return "started";
      } catch (error) {
        return error;
      }
    };
    expect(await started({ sead: 7 })).toMatchObject({ code: "invalid_option", message: expect.stringContaining("sead") });
    expect(await started({ threads: { ttl: 5 } })).toMatchObject({ code: "invalid_option", message: expect.stringContaining("threads.ttl") });
    expect(await started(null)).toMatchObject({ code: "invalid_option" });
    expect(await started({ seed: 7, threads: { ttlMs: 1000 } })).toBe("started");
    // A port out of range was node's untyped RangeError (ERR_SOCKET_BAD_PORT) from listen().
    for (const port of [-1, 65_536, 1.5, "4020"]) expect(await started({ port }), String(port)).toMatchObject({ code: "invalid_option", message: expect.stringContaining("port") });
  });
});
