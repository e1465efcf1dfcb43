import { createServer, connect, type Server, type Socket } from "node:net";
import { DATABASE_URL } from "./helpers.js";

/**
 * A TCP proxy in front of the test server that can be frozen: while frozen it accepts
 * connections and reads what clients send, but forwards nothing either way, and a client that
 * closes its end reaches the server only after the thaw, behind the bytes it sent. From the
 * client's side that is a paused server (SIGSTOP): the kernel accepts and buffers, nothing
 * answers. The shared server itself is never paused.
 */
export interface FreezableProxy {
  /** DATABASE_URL with the proxy's port. */
  url: string;
  freeze(): void;
  /** Deliver everything held, in order, and forward again. */
  thaw(): void;
  /** Connections accepted so far (for assertions). */
  accepted(): number;
  /**
   * From now on, hold each new connection's bytes (both ways) for `ms` after it is accepted, then
   * forward them: a server slow to accept connections (a loaded host, a far TLS endpoint) whose
   * established connections answer at once. Not meant to be combined with freeze(): a thaw
   * delivers a connection's held bytes before its delay is over.
   */
  slowConnections(ms: number): void;
  close(): Promise<void>;
}

interface Pair {
  client: Socket;
  upstream: Socket;
  toUpstream: Buffer[];
  toClient: Buffer[];
  clientEnded: boolean;
  upstreamEnded: boolean;
}

export async function freezableProxy(): Promise<FreezableProxy> {
  const target = new URL(DATABASE_URL);
  const pairs = new Set<Pair>();
  let frozen = false;
  let accepted = 0;
  let acceptDelayMs = 0;
  const server: Server = createServer((client) => {
    accepted++;
    const upstream = connect({ host: target.hostname, port: Number(target.port || 5432) });
    const pair: Pair = { client, upstream, toUpstream: [], toClient: [], clientEnded: false, upstreamEnded: false };
    pairs.add(pair);
    let held = acceptDelayMs > 0;
    const holding = () => frozen || held;
    if (held) {
      setTimeout(() => {
        held = false;
        if (frozen) return; // the thaw delivers it
        for (const chunk of pair.toUpstream.splice(0)) upstream.write(chunk);
        for (const chunk of pair.toClient.splice(0)) if (!client.destroyed) client.write(chunk);
      }, acceptDelayMs);
    }
    client.on("data", (chunk: Buffer) => (holding() ? pair.toUpstream.push(chunk) : upstream.write(chunk)));
    upstream.on("data", (chunk: Buffer) => (holding() ? pair.toClient.push(chunk) : client.write(chunk)));
    client.on("end", () => {
      pair.clientEnded = true;
      if (!frozen) upstream.end();
    });
    upstream.on("end", () => {
      pair.upstreamEnded = true;
      if (!frozen) client.end();
    });
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    // A client that vanishes while frozen: its bytes and its close still reach the server at the thaw.
    client.on("close", () => (frozen ? undefined : drop()));
    upstream.on("close", drop);
    client.on("error", () => {});
    upstream.on("error", () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("proxy has no port");
  const url = new URL(DATABASE_URL);
  url.hostname = "127.0.0.1";
  url.port = String(address.port);
  return {
    url: url.toString(),
    freeze: () => {
      frozen = true;
    },
    thaw: () => {
      frozen = false;
      for (const pair of pairs) {
        for (const chunk of pair.toUpstream.splice(0)) pair.upstream.write(chunk);
        for (const chunk of pair.toClient.splice(0)) if (!pair.client.destroyed) pair.client.write(chunk);
        if (pair.clientEnded || pair.client.destroyed) pair.upstream.end();
        if (pair.upstreamEnded) pair.client.end();
      }
    },
    accepted: () => accepted,
    slowConnections: (ms) => {
      acceptDelayMs = ms;
    },
    close: async () => {
      for (const pair of pairs) {
        pair.client.destroy();
        pair.upstream.destroy();
      }
      pairs.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
