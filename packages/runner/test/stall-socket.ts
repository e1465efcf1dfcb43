import { mkdtempSync, rmSync } from "node:fs";
import { connect, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * A byte that is in this process's socket before its event loop stalls, for the STREAM-16 tests
 * of a stall of the reader's own process. The byte is written within the call, before the bound
 * is armed, and the block runs as a microtask, after the code that arms the bound: so the bound
 * runs out during the block with the byte already there, whatever the host's own pauses add (a
 * block scheduled as an immediate let a descheduled process reach the bound's timer before the
 * byte was written: a real idle, failing the test on a loaded host). A Unix domain socket, not
 * TCP over loopback: its write puts the byte in the receiver's queue within the write call, where
 * loopback TCP hands delivery to the kernel's softirq work, which a loaded host may defer.
 */
export interface StallSocket {
  /**
   * Resolves when the byte arrives. Call it where the reader starts waiting (synchronously in the
   * call that the reader's bound is armed beside): it writes the byte at once and blocks the event
   * loop for `blockMs` in a microtask.
   */
  arrivesDuringStall(blockMs: number): Promise<void>;
  /** How many blocks were made. */
  blocks(): number;
  close(): Promise<void>;
}

export async function openStallSocket(): Promise<StallSocket> {
  const dir = mkdtempSync(join(tmpdir(), "dispatch-once-stall-"));
  const path = join(dir, "s");
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(path, resolve));
  const accepted = new Promise<Socket>((resolve) => server.once("connection", resolve));
  const sender = connect(path);
  await new Promise((resolve) => sender.once("connect", resolve));
  const receiver = await accepted;
  let blocks = 0;
  return {
    arrivesDuringStall(blockMs) {
      const arrived = new Promise<void>((resolve) => receiver.once("data", () => resolve()));
      sender.write("x");
      queueMicrotask(() => {
        // Blocks the thread as a starved process or a CPU-bound handler would, without spinning.
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, blockMs);
        blocks += 1;
      });
      return arrived;
    },
    blocks: () => blocks,
    async close() {
      sender.destroy();
      receiver.destroy();
      await new Promise((resolve) => server.close(resolve));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
