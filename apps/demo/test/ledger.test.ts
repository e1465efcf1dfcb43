import { connect, createServer, type Server, type Socket } from "node:net";
import { afterAll, describe, it } from "vitest";
import { openLedger } from "../src/ledger.js";

const DATABASE_URL = process.env["DATABASE_URL"] ?? "postgres://postgres@127.0.0.1:5432/test";
const REDIS_URL = process.env["REDIS_URL"] ?? "redis://127.0.0.1:6379";
const RUN = `t${process.pid}_${Date.now().toString(36)}`;

/** Longer than the adapters' default bound (5 s), well inside the demo's. */
const STALL_MS = 6_000;

/**
 * A loopback TCP proxy in front of a real server that, once `stall()` is called, holds what the
 * client sends for `ms` before passing it on: from the client's side, a server (or a host) too
 * loaded to answer for that long. Everything else is forwarded unchanged.
 */
class StallProxy {
  private heldUntil = 0;
  private readonly sockets = new Set<Socket>();
  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static async start(target: URL): Promise<StallProxy> {
    let proxy!: StallProxy;
    const server = createServer((client) => {
      const upstream = connect(Number(target.port), target.hostname);
      for (const s of [client, upstream]) {
        proxy.sockets.add(s);
        s.on("error", () => {});
        s.on("close", () => proxy.sockets.delete(s));
      }
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
      upstream.pipe(client);
      // Chunks are delivered in order: each waits for the end of the stall, or for the one before it.
      let queue = Promise.resolve();
      client.on("data", (chunk: Buffer) => {
        const wait = proxy.heldUntil - Date.now();
        queue = queue.then(() => (wait > 0 ? new Promise((r) => setTimeout(r, wait)) : undefined)).then(() => void upstream.write(chunk));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    if (address === null || typeof address === "string") throw new Error("proxy has no port");
    proxy = new StallProxy(server, address.port);
    return proxy;
  }

  /** Hold everything clients send from now for `ms`. */
  stall(ms: number): void {
    this.heldUntil = Date.now() + ms;
  }

  url(target: URL): string {
    const u = new URL(target.toString());
    u.hostname = "127.0.0.1";
    u.port = String(this.port);
    return u.toString();
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

const proxies: StallProxy[] = [];
afterAll(async () => {
  await Promise.all(proxies.map((p) => p.close()));
});

// The two stores' tests run at once: each waits out its own proxy's stall.
describe.concurrent("the demo's server-backed ledgers wait out a store stalled past the adapters' 5 s default", () => {
  for (const [kind, url] of [
    ["redis", REDIS_URL],
    ["postgres", DATABASE_URL],
  ] as const) {
    it(`${kind}: a claim and its completion sent into a ${STALL_MS / 1000} s stall both settle`, async ({ expect }) => {
      const target = new URL(url);
      const proxy = await StallProxy.start(target);
      proxies.push(proxy);
      const open = await openLedger({ kind, url: proxy.url(target) }, `demo_stall_${RUN}`, false);
      try {
        const key = "0123456789abcdef0123456789abcdef";
        const started = Date.now();
        proxy.stall(STALL_MS);
        const claim = await open.ledger.claim({ key, toolName: "pay", effect: "unkeyed_write", owner: "demo-test", leaseMs: 60_000, request: "{}" });
        // The stall really was longer than the adapters' default bound.
        expect(Date.now() - started).toBeGreaterThanOrEqual(STALL_MS - 50);
        expect(claim.outcome).toBe("claimed");
        if (claim.outcome !== "claimed") return;
        proxy.stall(STALL_MS);
        await open.ledger.complete(key, claim.fence, JSON.stringify({ ok: true }));
        const row = await open.ledger.lookup(key);
        expect(row?.state).toBe("completed");
      } finally {
        await open.close();
      }
    }, 60_000);
  }
});
