/**
 * The kit's own TCP proxy for the silent-store checks of both store levels (LEDGER-12, TURN-21): put
 * in front of a subject's store, it can make the store SILENT, as a paused server (SIGSTOP) or a
 * partition that sends no RST looks to a client: connections (established ones and new ones) stay open and accept bytes, and nothing
 * answers. heal() is the SIGCONT: what was held is delivered in order, both ways, so a statement the
 * store sent and stopped waiting for may still be applied late (which LEDGER-12 and TURN-21 allow,
 * and the checks tolerate). node:net only: the ledger level depends on core and fast-check alone.
 */
import { connect, createServer, type Server, type Socket } from "node:net";

/** Where a store listens (or where the proxy in front of it does). */
export interface StoreAddress {
  host: string;
  port: number;
}

/**
 * The host and port of a store's connection URL (`postgres://…`, `redis://…`), `defaultPort` when
 * it names none: what a subject's `raw.storeAddress` gives the kit.
 * @example storeAddressOf(process.env.DATABASE_URL!, 5432)
 */
export function storeAddressOf(url: string, defaultPort: number): StoreAddress {
  const parsed = new URL(url);
  return { host: parsed.hostname, port: Number(parsed.port || defaultPort) };
}

/**
 * The same connection URL (credentials, database, parameters) pointed at `via`, the kit's
 * SilenceProxy: what a subject's `raw.openVia` opens its instance with.
 * @example new PostgresLedger({ connectionString: urlVia(process.env.DATABASE_URL!, via) })
 */
export function urlVia(url: string, via: StoreAddress): string {
  const parsed = new URL(url);
  parsed.hostname = via.host;
  parsed.port = String(via.port);
  return parsed.toString();
}

export interface SilenceProxy {
  /** The proxy's own address: hand it to the ledger or conversation store instead of the store's. */
  readonly address: StoreAddress;
  /** True while silent. */
  readonly silent: boolean;
  /** From now on nothing answers: bytes are accepted and held, new connections are accepted and held. */
  silence(): void;
  /** Deliver everything held, in order (a client that closed meanwhile closes then), and forward again. */
  heal(): void;
  /** Connections accepted so far. */
  accepted(): number;
  /** Bytes held right now, both ways (what silence() kept back). */
  held(): number;
  /** Connections open right now (a client and its upstream count once). */
  open(): number;
  /** Destroy every connection and stop listening; resolves once the listener is closed. Idempotent. */
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

/**
 * Starts a proxy on 127.0.0.1 (a free port) in front of `target`. Every accepted connection gets
 * its own upstream connection to the target at once; while silent, bytes either way are held, so
 * the store sees a client that said nothing (a new connection's handshake never completes) and the
 * client sees a store that never answers.
 * @example const proxy = await startSilenceProxy({ host: "127.0.0.1", port: 5432 });
 */
export async function startSilenceProxy(target: StoreAddress): Promise<SilenceProxy> {
  if (typeof target?.host !== "string" || !Number.isInteger(target.port) || target.port <= 0 || target.port > 65_535) {
    throw new TypeError(`startSilenceProxy: expected a target { host, port }, got ${JSON.stringify(target)}`);
  }
  const pairs = new Set<Pair>();
  let silent = false;
  let accepted = 0;
  let closed: Promise<void> | undefined;

  const drop = (pair: Pair) => {
    pairs.delete(pair);
    pair.client.destroy();
    pair.upstream.destroy();
  };
  const server: Server = createServer({ allowHalfOpen: true }, (client) => {
    accepted++;
    const upstream = connect({ host: target.host, port: target.port, allowHalfOpen: true });
    const pair: Pair = { client, upstream, toUpstream: [], toClient: [], clientEnded: false, upstreamEnded: false };
    pairs.add(pair);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    client.on("data", (chunk: Buffer) => (silent ? pair.toUpstream.push(chunk) : upstream.write(chunk)));
    upstream.on("data", (chunk: Buffer) => (silent ? pair.toClient.push(chunk) : client.write(chunk)));
    // A half-close is held like data, so the store sees it after the bytes before it; and neither
    // side's is answered by the proxy's own (allowHalfOpen): a paused store's kernel acknowledges a
    // FIN, but the process that would close its side never runs, so a close that waits for it waits.
    client.on("end", () => {
      pair.clientEnded = true;
      if (!silent) upstream.end();
    });
    upstream.on("end", () => {
      pair.upstreamEnded = true;
      if (!silent) client.end();
    });
    // A client that gives up while silent (its bound passed) closes its end: the store still gets
    // its held bytes and its close at heal(), as a paused server would on SIGCONT.
    client.on("close", () => {
      if (!silent) drop(pair);
      else pair.clientEnded = true;
    });
    upstream.on("close", () => {
      if (!silent) drop(pair);
      else pair.upstreamEnded = true;
    });
    client.on("error", () => {});
    upstream.on("error", () => {});
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  const bound = server.address();
  if (bound === null || typeof bound === "string") throw new Error("startSilenceProxy: the listener has no port");
  const address: StoreAddress = { host: "127.0.0.1", port: bound.port };

  return {
    address,
    get silent() {
      return silent;
    },
    silence() {
      silent = true;
    },
    heal() {
      silent = false;
      for (const pair of [...pairs]) {
        for (const chunk of pair.toUpstream.splice(0)) if (!pair.upstream.destroyed) pair.upstream.write(chunk);
        for (const chunk of pair.toClient.splice(0)) if (!pair.client.destroyed) pair.client.write(chunk);
        if (pair.clientEnded || pair.client.destroyed) pair.upstream.end();
        if (pair.upstreamEnded || pair.upstream.destroyed) pair.client.end();
        if (pair.client.destroyed && pair.upstream.destroyed) pairs.delete(pair);
      }
    },
    accepted: () => accepted,
    held: () => [...pairs].reduce((n, p) => n + [...p.toUpstream, ...p.toClient].reduce((m, c) => m + c.length, 0), 0),
    open: () => pairs.size,
    close() {
      closed ??= new Promise<void>((resolve) => {
        silent = false;
        for (const pair of [...pairs]) drop(pair);
        server.close(() => resolve());
      });
      return closed;
    },
  };
}
