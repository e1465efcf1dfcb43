// `dispatch-once list --json | head -1`: the reader closes the pipe early, as head does.
import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BIN, randomKey, sqliteBackend, type Backend } from "./helpers.js";

describe("a reader that closes stdout early (| head)", () => {
  let backend: Backend;
  beforeAll(async () => {
    backend = await sqliteBackend();
    for (let i = 0; i < 300; i++) {
      await backend.ledger.claim({ key: randomKey(), toolName: "create_invoice", effect: "unkeyed_write", owner: "app", leaseMs: 600_000, request: "{}" });
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
    // Each row's JSON line made long, so that the listing is more than a pipe's buffer holds.
    const child = spawn(process.execPath, [BIN, "list", "--json", "--limit", "0", ...backend.args], { stdio: ["ignore", "pipe", "pipe"] });
    child.stdout.pause();
    // Read nothing for longer than the CLI waits for what a --tools module leaves running.
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.stdout.resume();
    const code = await new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
    expect(code).toBe(0);
    expect(out.trim().split("\n")).toHaveLength(300);
  }, 20_000);
});
