// Bad input of every kind: a typed error on stderr, a documented non-zero exit, nothing touched.
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { COMMANDS, EXIT_CODES } from "../src/index.js";
import { BIN, DATABASE_URL, runBin } from "./helpers.js";

const here = dirname(fileURLToPath(import.meta.url));

describe("dispatch-once usage", () => {
  it("without a command prints the command list and exits 2; --help exits 0", async () => {
    const none = await runBin([]);
    expect(none.code).toBe(EXIT_CODES.usage);
    expect(none.stderr).toContain("Usage: dispatch-once <command>");
    const help = await runBin(["--help"]);
    expect(help.code).toBe(0);
    for (const command of COMMANDS) expect(help.stdout).toContain(`  ${command.name} `);
    expect(help.stdout).toContain("3  not found");
  });

  it.each(COMMANDS.map((c) => c.name))("%s --help prints its usage and exits 0", async (name) => {
    const result = await runBin([name, "--help"]);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(new RegExp(`^Usage: dispatch-once ${name}`));
  });

  it("an unknown command or option exits 2 naming it", async () => {
    const command = await runBin(["lsit"]);
    expect(command.code).toBe(2);
    expect(command.stderr).toContain('unknown command "lsit"');
    const option = await runBin(["list", "--stat", "unknown", "--ledger", "x.db"]);
    expect(option.code).toBe(2);
    expect(option.stderr).toContain("Unknown option '--stat'");
    expect(option.stderr).toContain("Run dispatch-once list --help");
  });

  it("no ledger exits 2; DISPATCH_ONCE_LEDGER is the default target", async () => {
    const none = await runBin(["list"]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("no ledger: pass --ledger <target> or set DISPATCH_ONCE_LEDGER");
    const fromEnv = await runBin(["list"], { env: { DISPATCH_ONCE_LEDGER: "/nonexistent/ledger.db" } });
    expect(fromEnv.code).toBe(2);
    expect(fromEnv.stderr).toContain("no SQLite ledger file at /nonexistent/ledger.db");
  });

  it("an unsupported scheme exits 2 and never prints the URL's password", async () => {
    const result = await runBin(["list", "--ledger", "mysql://root:hunter2@db/app"]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("unsupported scheme mysql://");
    expect(result.stderr).not.toContain("hunter2");
  });

  it.each([
    ["postgres", "postgres://postgres@127.0.0.1:1/test"],
    ["redis", "redis://127.0.0.1:1"],
  ])("an unreachable %s server exits 1 with ledger_unavailable", async (_kind, target) => {
    const result = await runBin(["list", "--ledger", target]);
    expect(result.code).toBe(EXIT_CODES.error);
    expect(result.stderr).toMatch(/^dispatch-once list: .*\[ledger_unavailable\]\n$/);
  });

  it("a missing SQLite file is refused, not created", async () => {
    const dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-usage-"));
    try {
      const result = await runBin(["list", "--ledger", "sqlite:./typo.db"], { cwd: dir });
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(`no SQLite ledger file at ${join(dir, "typo.db")}`);
      expect(existsSync(join(dir, "typo.db"))).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each([
    [["list", "--older-than", "10"], "--older-than takes a duration like 30s"],
    [["list", "--state", "done"], "--state must be one of in_flight, completed, failed, unknown, released"],
    [["list", "--limit=1.5"], "--limit takes a whole number"],
    [["list", "--page-size", "5000"], "--page-size is at most 1000"],
    [["inspect"], "missing argument"],
    [["inspect", "a", "b"], 'unexpected argument "b"'],
    [["resolve", "k", "--reason", "x"], "give exactly one of --completed <json>, --failed <message>, --not-performed"],
    [["resolve", "k", "--not-performed", "--failed", "m", "--reason", "x"], "give exactly one of"],
    [["resolve", "k", "--not-performed"], "--reason <text> is required"],
    [["resolve", "k", "--not-performed", "--reason", "  "], "--reason <text> is required"],
    [["resolve", "k", "--not-performed", "--code", "c", "--reason", "x"], "--code only goes with --failed"],
    [["resolve", "k", "--completed", "{}", "--reason", "x", "--grace", "0s"], "--grace only goes with --not-performed"],
    [["resolve", "k", "--not-performed", "--reason", "x", "--grace", "60"], "--grace takes a duration like 30s"],
    [["resolve", "k", "--not-performed", "--reason", "x", "--expected-fence", "0"], "--expected-fence takes a whole number of at least 1"],
    [["resolve", "k", "--completed", "nope", "--reason", "x"], "--completed must be the result as JSON"],
    [["reconcile", "k"], "--tools <module> is required"],
    [["sweep", "--retention", "1day"], "--retention takes a duration like 30s"],
    [["resolve", "k", "--completed", '{"a":1}', "--completed", '{"b":2}', "--reason", "x", "--retention", "1d"], "--completed is given more than once"],
    [["resolve", "k", "--not-performed", "--reason", "x", "--reason", "y", "--retention", "1d"], "--reason is given more than once"],
    [["list", "-l", "/nonexistent/other.db"], "--ledger is given more than once"],
    [["resolve", "k", "--not-performed", "--reason", "x", "--retention", "7", "--current-fence"], "--retention takes a duration like 30s"],
    [["resolve", "k", "--not-performed", "--reason", "x", "--retention", "1d"], "--expected-fence <n> is required"],
    [["resolve", "k", "--not-performed", "--reason", "x", "--retention", "1d", "--expected-fence", "2", "--current-fence"], "give --expected-fence <n> or --current-fence, not both"],
    [["reconcile", "k", "--tools", "x.mjs", "--grace", "10"], "--grace takes a duration like 30s"],
  ])("%j exits 2: %s", async (args, message) => {
    // A ledger that does not exist: every one of these is refused before it is opened.
    const result = await runBin([...args, "--ledger", "/nonexistent/ledger.db"]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(message);
  });

  describe("a missing adapter package", () => {
    // The bin copied next to a node_modules that holds core but no ledger adapter: what a user
    // who installed only @dispatch-once/cli has.
    const dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-bare-"));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    it.each([
      ["postgres", DATABASE_URL, "@dispatch-once/ledger-postgres"],
      ["redis", "redis://127.0.0.1:6379", "@dispatch-once/ledger-redis"],
    ])("%s: exits 6 naming the package to install", async (_kind, target, pkg) => {
      const app = join(dir, "app");
      mkdirSync(join(app, "node_modules", "@dispatch-once"), { recursive: true });
      cpSync(dirname(BIN), join(app, "dist"), { recursive: true, force: true });
      try {
        symlinkSync(resolve(here, "../../core"), join(app, "node_modules", "@dispatch-once", "core"), "dir");
      } catch (error) {
        if ((error as { code?: string }).code !== "EEXIST") throw error;
      }
      let code = 0;
      let stderr = "";
      try {
        execFileSync(process.execPath, [join(app, "dist", "cli.js"), "list", "--ledger", target], { cwd: app, encoding: "utf8", stdio: "pipe" });
      } catch (error) {
        code = (error as { status: number }).status;
        stderr = (error as { stderr: string }).stderr;
      }
      expect(code, stderr).toBe(EXIT_CODES.missingPackage);
      expect(stderr).toContain(`needs ${pkg}`);
      expect(stderr).toContain(`npm i ${pkg}`);
    });
  });
});
