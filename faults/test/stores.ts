/**
 * The three stores under test, each with the faults it can suffer here, and a TCP proxy and a
 * private redis-server to cause them. The shared PostgreSQL and Redis servers are never paused,
 * restarted or reconfigured: PostgreSQL's faults are a proxy's (frozen = paused, cut = restarted or
 * unreachable); Redis runs a private server on a free port that the suite kills, restarts and stops.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import Database from "better-sqlite3";
import pg from "pg";
import { Redis } from "ioredis";
import type { Ledger } from "@dispatch-once/core";
import { PostgresLedger } from "@dispatch-once/ledger-postgres";
import { RedisLedger } from "@dispatch-once/ledger-redis";
import { SqliteLedger } from "@dispatch-once/ledger-sqlite";
import type { StoreConfig } from "./protocol.js";

export const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";

export interface Fault {
  name: string;
  /** Cause the fault and end it; resolves once the store is healthy again. */
  run(): Promise<void>;
}

export interface StoreUnderTest {
  name: string;
  worker: StoreConfig;
  faults: Fault[];
  /** What the suite could not do to this store, said in the summary. */
  skipped: string[];
  /** A ledger on the store itself (never through a fault), for reading rows. */
  reader(): Ledger;
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** SQLite: a file shared by the workers. Its fault: another process holds the write lock past the busy timeout and the lease. */
export async function sqliteStore(pauseMs: number): Promise<StoreUnderTest> {
  const dir = await mkdtemp(join(tmpdir(), "fault-suite-sqlite-"));
  const path = join(dir, "ledger.db");
  new SqliteLedger({ path }).close(); // create the table once, before the fleet
  let reader: SqliteLedger | undefined;
  return {
    name: "sqlite",
    worker: { kind: "sqlite", path, busyTimeoutMs: 300 },
    faults: [
      {
        name: `write lock held ${pauseMs} ms (claims and finishes refused: unavailable, leases run out)`,
        run: async () => {
          const db = new Database(path, { timeout: 5_000 });
          db.exec("BEGIN EXCLUSIVE");
          await sleep(pauseMs);
          db.exec("COMMIT");
          db.close();
        },
      },
    ],
    skipped: ["restart: a SQLite file has no server to restart (worker SIGKILLs are its crashes)"],
    reader: () => (reader ??= new SqliteLedger({ path })),
    close: async () => {
      await reader?.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** A TCP proxy that can freeze (a paused server: bytes held both ways) or cut (every connection dropped, new ones refused). */
export class StoreProxy {
  private readonly pairs = new Set<{ client: Socket; upstream: Socket; held: Array<[Socket, Buffer]> }>();
  private frozen = false;
  private refusing = false;
  private losing = false;
  private constructor(private readonly server: Server, readonly port: number) {}

  static async start(target: { host: string; port: number }): Promise<StoreProxy> {
    let proxy!: StoreProxy;
    const server = createServer((client) => proxy.accept(client, target));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
    const address = server.address();
    if (address === null || typeof address === "string") throw new Error("proxy has no port");
    proxy = new StoreProxy(server, address.port);
    return proxy;
  }

  private accept(client: Socket, target: { host: string; port: number }): void {
    client.on("error", () => {});
    if (this.refusing) return void client.destroy();
    const upstream = connect(target);
    upstream.on("error", () => {});
    const pair = { client, upstream, held: [] as Array<[Socket, Buffer]> };
    this.pairs.add(pair);
    client.on("data", (chunk: Buffer) => (this.frozen ? pair.held.push([upstream, chunk]) : upstream.write(chunk)));
    upstream.on("data", (chunk: Buffer) => {
      if (this.losing) return; // a reply lost on the way: the server did the work
      if (this.frozen) pair.held.push([client, chunk]);
      else client.write(chunk);
    });
    const drop = () => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    // A client that gives up while frozen: its bytes still reach the server at the thaw (a paused server runs them late).
    client.on("close", () => (this.frozen ? undefined : drop()));
    upstream.on("close", drop);
  }

  /** Paused for `ms`: everything is held, then delivered in order. */
  async freeze(ms: number): Promise<void> {
    this.frozen = true;
    await sleep(ms);
    this.frozen = false;
    for (const pair of [...this.pairs]) {
      for (const [to, chunk] of pair.held.splice(0)) if (!to.destroyed) to.write(chunk);
      if (pair.client.destroyed) pair.upstream.end();
    }
  }

  /**
   * Replies lost: for `ms` the server's answers are dropped (what the clients send still runs),
   * then every connection is cut and new ones are refused for `outageMs`: a client whose COMMIT
   * was sent meanwhile never learns that it applied.
   */
  async loseReplies(ms: number, outageMs = 0): Promise<void> {
    this.losing = true;
    await sleep(ms);
    const cut = this.cut(outageMs);
    this.losing = false;
    await cut;
  }

  /** Restarted or unreachable for `ms`: every connection dropped at once, new ones refused. */
  async cut(ms: number): Promise<void> {
    this.refusing = true;
    for (const pair of [...this.pairs]) {
      pair.client.destroy();
      pair.upstream.destroy();
    }
    await sleep(ms);
    this.refusing = false;
  }

  async close(): Promise<void> {
    for (const pair of this.pairs) {
      pair.client.destroy();
      pair.upstream.destroy();
    }
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** PostgreSQL: the shared server behind a proxy, in a schema of its own. */
export async function postgresStore(pauseMs: number, outageMs: number): Promise<StoreUnderTest> {
  const schema = `fault_suite_${randomBytes(5).toString("hex")}`;
  const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  await new PostgresLedger({ pool: admin, schema, durability: "durable" }).migrate();
  const target = new URL(DATABASE_URL);
  const proxy = await StoreProxy.start({ host: target.hostname, port: Number(target.port || 5432) });
  const url = new URL(DATABASE_URL);
  url.hostname = "127.0.0.1";
  url.port = String(proxy.port);
  let reader: PostgresLedger | undefined;
  return {
    name: "postgres",
    worker: { kind: "postgres", url: url.toString(), schema, timeoutMs: 400 },
    faults: [
      { name: `paused ${pauseMs} ms (frozen proxy: statements run late, past the lease)`, run: () => proxy.freeze(pauseMs) },
      { name: `connections cut and refused ${outageMs} ms (a restart as the clients see it)`, run: () => proxy.cut(outageMs) },
      { name: `unreachable ${outageMs * 2} ms`, run: () => proxy.cut(outageMs * 2) },
    ],
    skipped: ["restart of the server itself: the cluster is shared, so a restart is a proxy cut (every connection dropped, statements in flight applied or not)"],
    reader: () => (reader ??= new PostgresLedger({ pool: admin, schema, durability: "durable", timeoutMs: 30_000 })),
    close: async () => {
      await proxy.close();
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await admin.end();
    },
  };
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

async function answers(port: number, dir: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const probe = new Redis({ host: "127.0.0.1", port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    probe.on("error", () => {});
    try {
      await probe.connect();
      const reply = (await probe.call("CONFIG", "GET", "dir")) as string[];
      // Only our own server will do: another test's may have taken the port.
      if (reply[1] !== dir) throw new Error(`port ${port} is answered by another server`);
      return;
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`redis-server on ${port} did not answer: ${String(error)}`);
    } finally {
      probe.disconnect();
    }
    await sleep(30);
  }
}

/** Redis: a private redis-server (AOF, fsync always: durable) the suite kills, restarts and pauses with SIGSTOP. */
export async function redisStore(pauseMs: number, outageMs: number): Promise<StoreUnderTest> {
  const dir = await mkdtemp(join(tmpdir(), "fault-suite-redis-"));
  const port = await freePort();
  let child: ChildProcess | undefined;
  const launch = async () => {
    child = spawn(
      "redis-server",
      ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--daemonize", "no", "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "local"],
      { stdio: "ignore" },
    );
    await answers(port, dir, 15_000);
  };
  const kill = async () => {
    const running = child;
    if (running === undefined || running.exitCode !== null || running.signalCode !== null) return;
    const exited = new Promise((resolve) => running.once("exit", resolve));
    running.kill("SIGKILL");
    await exited;
  };
  await launch();
  const url = `redis://127.0.0.1:${port}`;
  const prefix = `fault-suite:${randomBytes(4).toString("hex")}`;
  let reader: RedisLedger | undefined;
  return {
    name: "redis",
    worker: { kind: "redis", url, prefix, timeoutMs: 400 },
    faults: [
      {
        name: `paused ${pauseMs} ms (SIGSTOP: scripts run late, past the lease)`,
        run: async () => {
          child!.kill("SIGSTOP");
          await sleep(pauseMs);
          child!.kill("SIGCONT");
        },
      },
      {
        name: "killed (SIGKILL) and restarted from its AOF",
        run: async () => {
          await kill();
          await launch();
        },
      },
      {
        name: `unreachable ${outageMs} ms (killed, restarted later)`,
        run: async () => {
          await kill();
          await sleep(outageMs);
          await launch();
        },
      },
    ],
    skipped: [],
    reader: () => (reader ??= new RedisLedger({ url, prefix, durability: "durable" })),
    close: async () => {
      await reader?.close();
      child?.kill("SIGCONT");
      await kill();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
