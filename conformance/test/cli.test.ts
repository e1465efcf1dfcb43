import { describe, expect, it } from "vitest";
import { spawnSync } from "node:child_process";
import { join } from "node:path";

const root = join(import.meta.dirname, "..");

function cli(args: string[], loader = false) {
  const run = spawnSync(process.execPath, [...(loader ? ["--import", "tsx"] : []), "dist/cli.js", ...args], {
    cwd: root,
    encoding: "utf8",
    timeout: 240_000,
  });
  return { code: run.status, stdout: run.stdout, stderr: run.stderr };
}

describe("dispatch-once-conformance CLI", () => {
  it("certifies the in-memory ledger: exit 0, every applicable rule passes", () => {
    const { code, stdout, stderr } = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "ledger", "--runs", "60", "--seed", "11"]);
    expect(stderr).toContain("✓ LEDGER-1 exactly one of 64 concurrent claims of one key wins");
    expect(stderr).toContain("(not applicable: needs corruption (raw.corrupt))");
    expect(stdout).toContain("Dispatch-Once conformance: ledger-memory (levels: ledger, seed 11, 60 runs)");
    expect(stdout).toMatch(/LEDGER-11\s+MUST\s+n\/a/);
    expect(stdout).toContain("CONFORMS: 18 rules pass, 3 not applicable by declared capabilities");
    expect(code).toBe(0);
  });

  it("--json prints a report a compliance matrix can be built from", () => {
    const { code, stdout } = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "ledger", "--runs", "20", "--seed", "3", "--json", "--quiet"]);
    expect(code).toBe(0);
    const report = JSON.parse(stdout);
    expect(report).toMatchObject({ subject: "ledger-memory", conforms: true, seed: 3, runs: 20, levels: ["ledger"] });
    expect(report.rules.find((r: { rule: string }) => r.rule === "LEDGER-12").status).toBe("not_applicable");
  });

  it("rejects a ledger without fencing: exit 1, the rule, a timeline and the replay command", () => {
    const { code, stdout } = cli(["--adapter", "test/fixtures/no-fencing-subject.ts", "--level", "ledger", "--runs", "100", "--seed", "5", "--quiet"], true);
    expect(code).toBe(1);
    expect(stdout).toMatch(/LEDGER-5\s+MUST\s+FAIL/);
    expect(stdout).toContain("DOES NOT CONFORM:");
    expect(stdout).toContain("breaks LEDGER-5");
    expect(stdout).toMatch(/\n {4}t=1 [^\n]+ -> [^\n]+\n/);
    expect(stdout).toMatch(/✗ expected stale_claim \(LEDGER-5\)/);
    const replay = /replay: pnpm conformance --adapter test\/fixtures\/no-fencing-subject\.ts --level ledger --seed 5 --path (\S+) --only (model-based:)/.exec(stdout);
    expect(replay, stdout).not.toBeNull();

    // The printed seed and path replay exactly the shrunk case, and only the model check runs.
    const again = cli(["--adapter", "test/fixtures/no-fencing-subject.ts", "--level", "ledger", "--seed", "5", "--path", replay![1]!, "--only", replay![2]!, "--quiet"], true);
    expect(again.code).toBe(1);
    expect(again.stdout).toContain("model-based");
    expect(again.stdout).toContain(`seed 5, path "${replay![1]}"`);
    expect(again.stdout).not.toContain("vector LT-");
    expect(again.stdout).not.toContain("random JSON texts");
  });

  it("runs every level by default: the ledger rules and the end-to-end property (CONF-2) in one report", () => {
    const { code, stdout } = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--runs", "5", "--seed", "3", "--json", "--quiet"]);
    const report = JSON.parse(stdout);
    expect(report.levels).toEqual(["ledger", "e2e"]);
    expect(report.rules.find((r: { rule: string }) => r.rule === "CONF-2")?.status).toBe("pass");
    expect(report.rules.find((r: { rule: string }) => r.rule === "LEDGER-1")?.status).toBe("pass");
    expect(code).toBe(0);
  });

  it("exits 2 with the usage on bad arguments", () => {
    const missing = cli([]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("--adapter <path to module> is required");
    const badRuns = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--runs", "many"]);
    expect(badRuns.code).toBe(2);
    expect(badRuns.stderr).toContain("--runs must be an integer");
    const noModule = cli(["--adapter", "test/fixtures/does-not-exist.mjs"]);
    expect(noModule.code).toBe(2);
    expect(noModule.stderr).toContain("cannot load --adapter");
    const pathWithoutSeed = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--path", "1:2"]);
    expect(pathWithoutSeed.code).toBe(2);
    expect(pathWithoutSeed.stderr).toContain("--path needs the --seed");
    const pathWithoutLevel = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--seed", "1", "--path", "1:2"]);
    expect(pathWithoutLevel.code).toBe(2);
    expect(pathWithoutLevel.stderr).toContain("give --level ledger or --level e2e");
    const badLevel = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "network"]);
    expect(badLevel.code).toBe(2);
    expect(badLevel.stderr).toContain("--level must be one of ledger, e2e, all");
  });
});
