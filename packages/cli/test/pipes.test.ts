// `dispatch-once list --json | head -1`: the reader closes the pipe early, as head does.
import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BIN, randomKey, sqliteBackend, type Backend } from "./helpers.js";

/**
 * Rows listed, each with a 1 KiB request: their JSON lines (about 370 KiB) are more than a pipe
 * (64 KiB) and the reader's stream buffer hold, so a listing nobody reads waits in the child.
 */
const ROWS = 300;
const REQUEST = JSON.stringify({ memo: "x".repeat(1024) });

describe("a reader that closes stdout early (| head)", () => {
  let backend: Backend;
  beforeAll(async () => {
    backend = await sqliteBackend();
    for (let i = 0; i < ROWS; i++) {
      await backend.ledger.claim({ key: randomKey(), toolName: "create_invoice", effect: "unkeyed_write", owner: "app", leaseMs: 600_000, request: REQUEST });
    }
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it("ends list quietly with exit 0: no EPIPE stack trace", async () => {
    const child = spawn(process.execPath, [BIN, "list", "--json", "--limit", "0", "--page-size", "1", ...backend.args], { stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    // Close the read end after the first line, as `head -1` does.
    child.stdout.once("data", () => child.stdout.destroy());
    const code = await new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
    expect(stderr).not.toContain("EPIPE");
    expect(stderr).not.toContain("Unhandled");
    expect(code).toBe(0);
  });

  it("gives a slow reader the whole listing: the process does not end before stdout is flushed", async () => {
    const child = spawn(process.execPath, [BIN, "list", "--json", "--limit", "0", ...backend.args], { stdio: ["ignore", "pipe", "pipe"] });
    const closed = new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
    child.stdout.pause();
    // Read nothing for longer than the CLI waits for what a --tools module leaves running: the
    // listing (more than a pipe holds) waits in the child's stdout.
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.stdout.resume(); // paused explicitly: a 'data' listener alone does not resume it
    expect(await closed).toBe(0);
    expect(out.length).toBeGreaterThan(256 * 1024);
    expect(out.trim().split("\n")).toHaveLength(ROWS);
  }, 20_000);
});
