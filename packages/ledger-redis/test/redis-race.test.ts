import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, expect, it } from "vitest";
import { RedisLedger } from "../src/index.js";
import { REDIS_URL, deleteByPrefix, parseStored, rawClient, uniquePrefix } from "./helpers.js";
import { compiledEntry } from "@dispatch-once/test-processes";

const WORKERS = 4;
const KEYS = 300;
const prefix = uniquePrefix("race");
let raw: Redis;
const children: ChildProcessWithoutNullStreams[] = [];

beforeAll(async () => {
  raw = rawClient();
  expect(await raw.ping()).toBe("PONG");
});

afterAll(async () => {
  for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
  await deleteByPrefix(raw, prefix);
  await raw.quit();
});

function startWorker(id: number): { child: ChildProcessWithoutNullStreams; ready: Promise<void>; done: Promise<string> } {
  const script = fileURLToPath(new URL("./race-worker.ts", import.meta.url));
  const child = spawn(process.execPath, [compiledEntry(script), prefix, String(KEYS), String(id)], {
    cwd: fileURLToPath(new URL("..", import.meta.url)),
    env: { ...process.env, REDIS_URL },
  });
  children.push(child);
  let out = "";
  let err = "";
  let onReady: () => void = () => {};
  const ready = new Promise<void>((resolve) => (onReady = resolve));
  child.stdout.on("data", (chunk: Buffer) => {
    out += chunk.toString();
    if (out.startsWith("ready\n")) onReady();
  });
  child.stderr.on("data", (chunk: Buffer) => (err += chunk.toString()));
  const done = new Promise<string>((resolve, reject) => {
    child.on("exit", (code) => {
      if (code === 0) resolve(out.slice("ready\n".length));
      else reject(new Error(`worker ${id} exited with ${code}: ${err}`));
    });
  });
  done.catch(() => onReady());
  return { child, ready, done };
}

it(`${WORKERS} OS processes race for ${KEYS} keys: one winner and exactly one run per key, read from Redis`, async () => {
  const workers = Array.from({ length: WORKERS }, (_, i) => startWorker(i));
  await Promise.all(workers.map((w) => w.ready));
  for (const w of workers) w.child.stdin.end("go\n");
  const summaries = (await Promise.all(workers.map((w) => w.done))).map(
    (text) => JSON.parse(text) as { workerId: string; won: string[]; seen: number },
  );

  // What the processes say they won: every key exactly once.
  const claimedBy = new Map<string, string>();
  for (const s of summaries) {
    for (const key of s.won) {
      expect(claimedBy.has(key), `key ${key} won twice`).toBe(false);
      claimedBy.set(key, s.workerId);
    }
    expect(s.won.length + s.seen).toBe(KEYS);
  }
  expect(claimedBy.size).toBe(KEYS);
  // More than one process must have won something, or this was not a race.
  expect(summaries.filter((s) => s.won.length > 0).length).toBeGreaterThan(1);

  // The run log, read directly: one run per key, by the process that claimed it, with fence 1.
  const runs = await raw.lrange(`${prefix}:runs`, 0, -1);
  expect(runs).toHaveLength(KEYS);
  const runKeys = new Set<string>();
  for (const entry of runs) {
    const [key, worker, fence] = entry.split("|") as [string, string, string];
    expect(runKeys.has(key), `key ${key} ran twice`).toBe(false);
    runKeys.add(key);
    expect(worker).toBe(claimedBy.get(key));
    expect(fence).toBe("1");
  }

  // The rows, read directly: completed once, by the winner.
  const probe = new RedisLedger({ url: REDIS_URL, prefix });
  for (let i = 0; i < KEYS; i++) {
    const key = `race-${i}`;
    const row = parseStored((await raw.get(probe.redisKey(key)))!);
    expect(row.header).toMatchObject({ state: "completed", fence: 1 });
    expect(JSON.parse(row.body)).toEqual({ worker: claimedBy.get(key), key });
  }
  await probe.close();
});
