import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { compiledEntry } from "@dispatch-once/test-processes";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { http, payment } from "./helpers.js";

const packageDir = join(import.meta.dirname, "..");
const dir = mkdtempSync(join(tmpdir(), "mock-payments-cli-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const children: ChildProcess[] = [];
afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
});

interface Running {
  child: ChildProcess;
  url: string;
  exited: Promise<{ code: number | null; stderr: string }>;
}

/** Run src/cli.ts (through tsx) and wait for its "listening on" line. */
function runCli(args: string[]): Promise<Running> {
  const child = spawn(process.execPath, [compiledEntry(join(packageDir, "src/cli.ts")), ...args], { cwd: packageDir, stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  let stdout = "";
  let stderr = "";
  const exited = new Promise<{ code: number | null; stderr: string }>((resolve) =>
    child.on("exit", (code) => resolve({ code, stderr })),
  );
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve, reject) => {
    child.stdout!.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      const match = /mock-payments listening on (http:\/\/\S+)\n/.exec(stdout);
      if (match) resolve({ child, url: match[1]!, exited });
    });
    void exited.then(({ code }) => reject(new Error(`cli exited with ${code} before listening: ${stderr}`)));
  });
}

describe("CLI", () => {
  it("starts on the given port, honours --require-key and --latency-ms, and stops on SIGTERM", async () => {
    const cli = await runCli(["--port", "0", "--require-key", "--latency-ms", "1"]);
    expect(cli.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const noKey = await http(cli, "POST", "/v1/payments", { body: payment() });
    expect(noKey.status).toBe(400);
    expect(noKey.body.code).toBe("idempotency_key_missing");
    const created = await http(cli, "POST", "/v1/payments", { key: "cli-1", body: payment() });
    expect(created.status).toBe(201);
    const faults = await http(cli, "GET", "/_control/faults", { token: null });
    expect(faults.body.baselineLatencyMs).toBe(1);
    const effects = await http(cli, "GET", "/_control/effects", { token: null });
    expect(effects.body.effects.map((e: { resourceId: string }) => e.resourceId)).toEqual([created.body.id]);
    cli.child.kill("SIGTERM");
    expect((await cli.exited).code).toBe(0);
  });

  it("exits with code 70 on crash_after_accept, and with --sqlite the restarted process replays the payment", async () => {
    const path = join(dir, `cli-${process.pid}.db`);
    const first = await runCli(["--port", "0", "--sqlite", path]);
    await expect(
      http(first, "POST", "/v1/payments", { key: "cli-crash", body: payment(), headers: { "x-mock-fault": "crash_after_accept" } }),
    ).rejects.toThrow();
    const { code, stderr } = await first.exited;
    expect(code).toBe(70);
    expect(stderr).toContain("crash_after_accept");

    const second = await runCli(["--port", "0", "--sqlite", path]);
    const replay = await http(second, "POST", "/v1/payments", { key: "cli-crash", body: payment() });
    expect(replay.status).toBe(201);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    const effects = await http(second, "GET", "/_control/effects", { token: null });
    expect(effects.body.effects).toHaveLength(1);
    expect(effects.body.effects[0].resourceId).toBe(replay.body.id);
    second.child.kill("SIGTERM");
    expect((await second.exited).code).toBe(0);
  });

  it("applies a seeded fault plan from --seed and --p-fail", async () => {
    const cli = await runCli(["--port", "0", "--seed", "42", "--p-fail", "1"]);
    expect((await http(cli, "POST", "/v1/payments", { key: "k", body: payment() })).status).toBe(503);
    cli.child.kill("SIGTERM");
    await cli.exited;
  });

  it.each([
    [["--port", "http"]],
    [["--latency-ms", "-3"]],
    [["--bogus"]],
    [["--p-drop", "0.5"]],
  ])("exits with code 2 and the usage for bad arguments %j", async (args) => {
    await expect(runCli(args)).rejects.toThrow(/exited with 2 .*usage: mock-payments/s);
  });
});
