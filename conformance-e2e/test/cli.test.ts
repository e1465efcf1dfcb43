import { describe, expect, it } from "vitest";
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

/**
 * The end-to-end level through the ONE CLI, `dispatch-once-conformance` of @dispatch-once/conformance,
 * which loads this package for `--level e2e` (run here from this package's directory, as from a
 * project that has both installed). Its ledger-level behaviour is tested in that package.
 */
const root = join(import.meta.dirname, "..");
const kitCli = join(dirname(createRequire(import.meta.url).resolve("@dispatch-once/conformance/package.json")), "dist", "cli.js");
// The base package's hung adapter (a pool deadlock), shared rather than copied.
const hung = join(root, "..", "conformance", "test", "fixtures", "hung-subject.mjs");

function cli(args: string[], env: Record<string, string> = {}) {
  const started = performance.now();
  const run = spawnSync(process.execPath, [kitCli, ...args], {
    cwd: root,
    encoding: "utf8",
    timeout: 240_000,
    env: { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("CONFORMANCE_"))), ...env },
  });
  return { code: run.status, stdout: run.stdout, stderr: run.stderr, ms: performance.now() - started };
}

describe("dispatch-once-conformance --level e2e (CONF-2)", () => {
  it("runs every installed level by default: the ledger rules and the end-to-end property in one report", () => {
    const { code, stdout, stderr } = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--runs", "5", "--seed", "3", "--json", "--quiet"]);
    expect(stderr).not.toContain("not installed");
    const report = JSON.parse(stdout);
    expect(report.levels).toEqual(["ledger", "e2e"]);
    expect(report.rules.find((r: { rule: string }) => r.rule === "CONF-2")?.status).toBe("pass");
    expect(report.rules.find((r: { rule: string }) => r.rule === "LEDGER-1")?.status).toBe("pass");
    expect(code).toBe(0);
  });

  it("--provider openai runs the end-to-end level on the OpenAI Responses side (openai-chat on Chat Completions) and the report names it; an unknown provider is a usage error", () => {
    const { code, stdout } = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "e2e", "--provider", "openai", "--e2e-runs", "5", "--seed", "3", "--json", "--quiet"]);
    const report = JSON.parse(stdout);
    expect(report.provider).toBe("openai");
    expect(report.checks[0].name).toContain("(5 runs, seed 3) (provider openai)");
    expect(report.rules.find((r: { rule: string }) => r.rule === "CONF-2")?.status).toBe("pass");
    expect(code).toBe(0);
    // The default stays the Anthropic side, and says so.
    const byDefault = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "e2e", "--e2e-runs", "2", "--seed", "3", "--json", "--quiet"]);
    expect(JSON.parse(byDefault.stdout).provider).toBe("anthropic");
    const unknown = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "e2e", "--provider", "opnai"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('provider must be one of anthropic, openai, openai-chat, ai-sdk, got "opnai"');
    // The Chat Completions side, by its name.
    const chat = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "e2e", "--provider", "openai-chat", "--e2e-runs", "2", "--seed", "3", "--json", "--quiet"]);
    expect(JSON.parse(chat.stdout).checks[0].name).toContain("(2 runs, seed 3) (provider openai-chat)");
    expect(chat.code).toBe(0);
    const ledgerOnly = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "ledger", "--provider", "openai"]);
    expect(ledgerOnly.code).toBe(2);
    // Five processes of the CLI, each loading the kit: four were past 60 s on a loaded CI host (2026-12-06).
  }, 180_000);

  it("--provider ai-sdk runs the end-to-end level as an AI SDK app (streamText, createOnceTools) and the report names it", () => {
    const { code, stdout } = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "e2e", "--provider", "ai-sdk", "--e2e-runs", "3", "--seed", "3", "--json", "--quiet"]);
    const report = JSON.parse(stdout);
    expect(report.provider).toBe("ai-sdk");
    expect(report.checks[0].name).toContain("(3 runs, seed 3) (provider ai-sdk)");
    expect(report.rules.find((r: { rule: string }) => r.rule === "CONF-2")?.status).toBe("pass");
    expect(code).toBe(0);
  });

  it("a hung adapter fails the end-to-end level within the CLI's time limits", () => {
    const run = cli(["--adapter", hung, "--level", "e2e", "--e2e-runs", "3", "--check-timeout", "3000", "--timeout", "30000", "--quiet"]);
    expect(run.code).toBe(1);
    expect(run.ms).toBeLessThan(30_000);
    expect(run.stdout).toMatch(/CONF-2\s+MUST\s+FAIL/);
  });

  it("reads CONFORMANCE_E2E_RUNS as the API does, --e2e-runs over it and --runs over both", () => {
    const both = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--only", "model-based", "--json", "--quiet"], { CONFORMANCE_RUNS: "4", CONFORMANCE_E2E_RUNS: "2", CONFORMANCE_SEED: "7" });
    expect(JSON.parse(both.stdout).runsByLevel).toEqual({ ledger: 4, e2e: 2 });
    const flags = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--runs", "3", "--only", "model-based", "--json", "--quiet"], { CONFORMANCE_E2E_RUNS: "2" });
    expect(JSON.parse(flags.stdout).runsByLevel).toEqual({ ledger: 3, e2e: 3 });
    const e2e = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "e2e", "--seed", "4", "--json", "--quiet"], { CONFORMANCE_E2E_RUNS: "2" });
    expect(e2e.code).toBe(0);
    expect(JSON.parse(e2e.stdout).checks[0].name).toContain("(2 runs, seed 4)");
    const bad = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "e2e"], { CONFORMANCE_E2E_RUNS: "lots" });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("CONFORMANCE_E2E_RUNS must be an integer");
  });
});

describe("dispatch-once-conformance --store --level e2e: a conversation store under the turn runner", () => {
  const oneLine = (run: ReturnType<typeof cli>) => run.stderr.trimEnd().split("\n");

  it("runs the store under test (over the kit's in-memory ledger): the report names the store, and its factory made the stores", () => {
    const run = cli(["--store", "test/fixtures/counting-store-subject.mjs", "--level", "e2e", "--e2e-runs", "3", "--seed", "3", "--json", "--quiet"]);
    const report = JSON.parse(run.stdout);
    expect(report).toMatchObject({ subject: "conversation-memory-counted", levels: ["e2e"], provider: "anthropic", runsByLevel: { e2e: 3 } });
    expect(report.rules.find((r: { rule: string }) => r.rule === "CONF-2")?.status).toBe("pass");
    expect(Number(/counted: (\d+) conversation stores/.exec(run.stderr)?.[1])).toBeGreaterThan(0);
    expect(run.code).toBe(0);
  });

  it("a store subject without conversationStore({ now }) cannot run the e2e level, nor a store the AI SDK side: exit 2, one line each", () => {
    const noFactory = cli(["--store", "test/fixtures/no-runner-factory-store.mjs", "--level", "e2e"]);
    expect(noFactory.code).toBe(2);
    expect(noFactory.stderr).toContain("needs the subject's conversationStore({ now })");
    expect(oneLine(noFactory)).toHaveLength(1);
    const aiSdk = cli(["--store", "test/fixtures/counting-store-subject.mjs", "--level", "e2e", "--provider", "ai-sdk"]);
    expect(aiSdk.code).toBe(2);
    expect(aiSdk.stderr).toContain("--provider ai-sdk runs an AI SDK app, which keeps no conversation store");
    expect(oneLine(aiSdk)).toHaveLength(1);
  });
});
