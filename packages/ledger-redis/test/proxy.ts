import { createServer, connect, type Server, type Socket } from "node:net";

/**
 * A TCP proxy on loopback between a client and a real Redis, with two faults a test arms for the
 * next client→server chunk that contains a marker (e.g. a claim's unique owner string):
 * - `cutAfterReply(marker)`: forward the chunk, let the server run it, swallow its reply and drop
 *   the client's connection: the command ran, but its reply was lost (a connection reset).
 * - `hold(marker, ms)`: keep that chunk, and everything after it on the same connection, for `ms`,
 *   then forward it in order: from this client's view the server was paused, and runs the command
 *   late (after the client's timeout), as a SIGSTOPped Redis would on SIGCONT. With `thenDrop`,
 *   only the marked chunk is forwarded and the connection is then dropped: what the client sent
 *   after it (e.g. a release behind a claim) never arrives, as if the client had died.
 * - `delayReplies(ms)`: from now on, every server→client chunk reaches the client `ms` late, in
 *   order (a slow link or a busy server: each command answered, late).
 * Everything else is forwarded unchanged, both ways. Counts let a test see how often a marker
 * reached the server.
 */
export class FaultProxy {
  readonly port: number;
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private faults: Array<{ marker: Buffer; kind: "cut" | "hold"; ms: number; thenDrop: boolean; done: () => void }> = [];
  /** How many chunks containing each watched marker reached the server. */
  private readonly seen = new Map<string, number>();
  accepted = 0;
  private replyDelayMs = 0;

  private constructor(server: Server, port: number) {
    this.server = server;
    this.port = port;
  }

  static async start(target: { host: string; port: number }): Promise<FaultProxy> {
    let proxy!: FaultProxy;
    const server = createServer((client) => proxy.handle(client, target));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    const address = server.address();
    if (address === null || typeof address === "string") throw new Error("proxy has no port");
    proxy = new FaultProxy(server, address.port);
    return proxy;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Count chunks containing `marker` that are forwarded to the server from now on. */
  watch(marker: string): void {
    this.seen.set(marker, this.seen.get(marker) ?? 0);
  }

  /** How many chunks containing `marker` reached the server (watch() it first). */
  count(marker: string): number {
    return this.seen.get(marker) ?? 0;
  }

  /** Resolves once the cut happened: the chunk ran on the server and its reply was dropped. */
  cutAfterReply(marker: string): Promise<void> {
    return new Promise((done) => this.faults.push({ marker: Buffer.from(marker), kind: "cut", ms: 0, thenDrop: false, done }));
  }

  /** Resolves once the held chunk (and what followed it) has been forwarded. */
  hold(marker: string, ms: number, options: { thenDrop?: boolean } = {}): Promise<void> {
    return new Promise((done) =>
      this.faults.push({ marker: Buffer.from(marker), kind: "hold", ms, thenDrop: options.thenDrop === true, done }),
    );
  }

  /** Deliver every reply `ms` late from now on (0: at once again). */
  delayReplies(ms: number): void {
    this.replyDelayMs = ms;
  }

  /** Drop every open connection (the proxy keeps listening). */
  dropAll(): void {
    for (const socket of this.sockets) socket.destroy();
  }

  async close(): Promise<void> {
    this.dropAll();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private handle(client: Socket, target: { host: string; port: number }): void {
    this.accepted++;
    const upstream = connect(target.port, target.host);
    this.sockets.add(client);
    this.sockets.add(upstream);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    let held: Buffer[] | undefined; // client→server bytes kept back while a hold is on
    let cut: (() => void) | undefined; // set once a cut chunk was forwarded: drop the next reply
    let draining = false; // thenDrop: the upstream ends by itself once its last chunk was flushed
    const end = () => {
      client.destroy();
      if (!draining) upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    const forward = (chunk: Buffer) => {
      for (const [marker, n] of this.seen) if (chunk.includes(marker)) this.seen.set(marker, n + 1);
      upstream.write(chunk);
    };
    client.on("data", (chunk: Buffer) => {
      if (held !== undefined) {
        held.push(chunk);
        return;
      }
      const index = this.faults.findIndex((f) => chunk.includes(f.marker));
      if (index < 0) return forward(chunk);
      const [fault] = this.faults.splice(index, 1);
      if (fault!.kind === "cut") {
        cut = fault!.done;
        forward(chunk);
        return;
      }
      held = [chunk];
      setTimeout(() => {
        const pending = held ?? [];
        held = undefined;
        if (fault!.thenDrop) {
          // The server reads the chunk before the end of the stream, so it still runs it.
          for (const [marker, n] of this.seen) if (chunk.includes(marker)) this.seen.set(marker, n + 1);
          draining = true;
          upstream.end(chunk);
          client.destroy();
        } else {
          for (const piece of pending) forward(piece);
        }
        fault!.done();
      }, fault!.ms);
    });
    upstream.on("data", (chunk: Buffer) => {
      if (cut !== undefined) {
        const done = cut;
        cut = undefined;
        end(); // the reply is never delivered
        done();
        return;
      }
      const deliver = () => {
        if (!client.destroyed) client.write(chunk);
      };
      // Timers of one delay fire in the order they were set: the replies stay in order.
      if (this.replyDelayMs > 0) setTimeout(deliver, this.replyDelayMs);
      else deliver();
    });
    client.on("error", end);
    upstream.on("error", end);
    client.on("close", end);
    upstream.on("close", end);
  }
}
