import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { compiledEntry } from "@dispatch-once/test-processes";
import { describe, expect, it } from "vitest";

const packageDir = join(__dirname, "..");

/** Run src/cli.ts (through tsx) with a command line that must be refused before it listens. */
function refused(...args: string[]) {
  const result = spawnSync(process.execPath, [compiledEntry(join(packageDir, "src/cli.ts")), ...args], { cwd: packageDir, encoding: "utf8", timeout: 30_000 });
  return { code: result.status, stderr: result.stderr };
}

describe("mock-provider CLI: a bad flag is a usage error (exit 2), as in mock-payments", () => {
  it.each([
    [["--fault-rules", "{bad"], /^mock-provider: --fault-rules must be a JSON array of fault rules: /],
    [["--fault-rules", '{"times":1}'], /^mock-provider: --fault-rules must be a JSON array of fault rules\n/],
    [["--fault-rules", '[{"fault":{"kind":"nope"}}]'], /^mock-provider: --fault-rules: invalid fault rule: /],
    [["--pings", "bogus"], /^mock-provider: --pings must be standard, none or every_event, got "bogus"\n/],
    [["--port", "abc"], /^mock-provider: --port must be a non-negative number, got "abc"\n/],
    [["--no-such-flag"], /^mock-provider: Unknown option '--no-such-flag'/],
  ])("%j", (args, message) => {
    const { code, stderr } = refused(...args);
    expect(code, stderr).toBe(2);
    expect(stderr).toMatch(message);
    expect(stderr).toContain("usage: mock-provider ");
  }, 30_000);
});
