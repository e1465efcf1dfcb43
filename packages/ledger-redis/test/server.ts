import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";

/**
 * A private redis-server on a loopback port, started by a test with the settings it needs
 * (the shared server's configuration is never changed), killable and restartable on the same
 * port and data directory, and stopped by the test.
 */
export interface PrivateServer {
  port: number;
  dir: string;
  url: string;
  /** SIGKILL (a crash: nothing flushed beyond what the settings already flushed) and wait for exit. */
  kill(): Promise<void>;
  /** Start again with the same arguments, port and directory; resolves when it answers PING. */
  restart(): Promise<void>;
  /** SIGTERM (SIGKILL after 3 s), remove the directory. */
  stop(): Promise<void>;
}

async function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

export async function freePort(): Promise<number> {
  for (;;) {
    const port = 20000 + Math.floor(Math.random() * 9000);
    if (await portFree(port)) return port;
  }
}

async function answers(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const probe = new Redis({ host: "127.0.0.1", port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    probe.on("error", () => {});
    try {
      await probe.connect();
      if ((await probe.ping()) === "PONG") return;
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`redis-server on ${port} did not answer: ${String(error)}`);
    } finally {
      probe.disconnect();
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once("exit", () => resolve()));
}

/** The data directory of the server answering on `port`: proves it is the one we started. */
async function dirOf(port: number): Promise<string | undefined> {
  const probe = new Redis({ host: "127.0.0.1", port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  try {
    await probe.connect();
    const reply = (await probe.call("CONFIG", "GET", "dir")) as string[];
    return reply[1];
  } catch {
    return undefined;
  } finally {
    probe.disconnect();
  }
}

export async function startServer(args: string[]): Promise<PrivateServer> {
  const dir = await mkdtemp(join(tmpdir(), "ledger-redis-server-"));
  let port = await freePort();
  let argv: string[] = [];
  let child: ChildProcess;
  const launch = async () => {
    argv = ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--daemonize", "no", ...args];
    child = spawn("redis-server", argv, { stdio: "ignore" });
    await answers(port, 15_000);
    // Test files run in parallel and each picks random ports: another file's server (or proxy)
    // may have taken this port between the check and the spawn. Only our own server will do.
    if ((await dirOf(port)) !== dir) {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      throw new Error(`port ${port} is answered by another server`);
    }
  };
  const firstLaunch = async () => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await launch();
      } catch (error) {
        if (attempt >= 5) throw error;
        port = await freePort();
      }
    }
  };
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const timer = setTimeout(() => child.kill("SIGKILL"), 3000);
      child.kill("SIGTERM");
      await exited(child);
      clearTimeout(timer);
    }
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await firstLaunch();
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    port,
    dir,
    url: `redis://127.0.0.1:${port}`,
    async kill() {
      child.kill("SIGKILL");
      await exited(child);
    },
    restart: launch,
    stop,
  };
}
