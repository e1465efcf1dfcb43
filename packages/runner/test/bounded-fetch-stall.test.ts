import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { boundedFetch } from "../src/index.js";
import { openStallSocket, type StallSocket } from "./stall-socket.js";

/*
 * STREAM-16 for boundedFetch: a stall of the reader's own process (a starved process on a loaded
 * host) is not the stream's silence. Each answer (the headers, every chunk) comes through a local
 * socket: its byte is written, then the event loop is blocked past the bound, so the bound's
 * timer is due before that turn's I/O is read. The response was never idle: it must be read whole.
 */
const IDLE_MS = 100;
let socket: StallSocket;

beforeAll(async () => {
  socket = await openStallSocket();
});
afterAll(() => socket.close());

/** Resolves when the socket delivers a byte written just before a block of 3 × IDLE_MS. */
const arrivesDuringStall = () => socket.arrivesDuringStall(3 * IDLE_MS);

describe("STREAM-16 boundedFetch times the network, not its own process", () => {
  it("STREAM-16 headers and chunks that were received while the process was blocked past idleMs are read, not an idle abort", async () => {
    const chunks = ["event: a\n\n", "event: b\n\n", "event: c\n\n"];
    const inner: typeof fetch = async () => {
      await arrivesDuringStall();
      let i = 0;
      const body = new ReadableStream<Uint8Array>(
        {
          async pull(controller) {
            if (i === chunks.length) return controller.close();
            await arrivesDuringStall();
            controller.enqueue(new TextEncoder().encode(chunks[i++]!));
          },
        },
        { highWaterMark: 0 },
      );
      return new Response(body, { status: 200 });
    };
    const response = await boundedFetch({ idleMs: IDLE_MS, fetch: inner })("http://example.invalid/");
    expect(await response.text()).toBe(chunks.join(""));
    expect(socket.blocks()).toBe(1 + chunks.length);
  });
});
