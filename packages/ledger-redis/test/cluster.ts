import { spawn, execFile, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Redis } from "ioredis";

const run = promisify(execFile);

/** A local three-node Redis Cluster on loopback, started by the test and torn down by it. */
export interface LocalCluster {
  ports: number[];
  dir: string;
  stop(): Promise<void>;
}

async function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/** Random ports >= 30000 whose cluster bus port (+10000) is free too. */
async function pickPorts(count: number): Promise<number[]> {
  const ports: number[] = [];
  while (ports.length < count) {
    const port = 30000 + Math.floor(Math.random() * 25000);
    if (ports.includes(port) || ports.includes(port + 10000) || ports.includes(port - 10000)) continue;
    if ((await portFree(port)) && (await portFree(port + 10000))) ports.push(port);
  }
  return ports;
}

/** Polls `probe` every 100 ms until it returns a value; a probe that throws is tried again. */
export async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ""}`);
}

async function onNode<T>(port: number, f: (client: Redis) => Promise<T>): Promise<T> {
  const client = new Redis({ host: "127.0.0.1", port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on("error", () => {});
  try {
    await client.connect();
    return await f(client);
  } finally {
    client.disconnect();
  }
}

export async function startCluster(): Promise<LocalCluster> {
  const dir = await mkdtemp(join(tmpdir(), "ledger-redis-cluster-"));
  const processes: ChildProcess[] = [];
  let ports: number[] = [];
  const stop = async () => {
    await Promise.all(
      processes.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            const timer = setTimeout(() => child.kill("SIGKILL"), 3000);
            child.once("exit", () => {
              clearTimeout(timer);
              resolve();
            });
            child.kill("SIGTERM");
          }),
      ),
    );
    await rm(dir, { recursive: true, force: true });
  };
  try {
    ports = await pickPorts(3);
    for (const port of ports) {
      const child = spawn(
        "redis-server",
        [
          "--port", String(port),
          "--bind", "127.0.0.1",
          "--cluster-enabled", "yes",
          "--cluster-config-file", join(dir, `nodes-${port}.conf`),
          "--save", "",
          "--appendonly", "no",
          "--daemonize", "no",
          "--dir", dir,
        ],
        { stdio: "ignore" },
      );
      processes.push(child);
    }
    for (const port of ports) {
      await until(`node ${port}`, 15_000, () => onNode(port, async (c) => ((await c.ping()) === "PONG" ? true : undefined)));
    }
    await run(
      "redis-cli",
      ["--cluster", "create", ...ports.map((p) => `127.0.0.1:${p}`), "--cluster-replicas", "0", "--cluster-yes"],
      { timeout: 30_000 },
    );
    for (const port of ports) {
      await until(`cluster_state:ok on ${port}`, 30_000, () =>
        onNode(port, async (c) => ((await c.cluster("INFO")).includes("cluster_state:ok") ? true : undefined)),
      );
    }
    return { ports, dir, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
