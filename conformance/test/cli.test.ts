import { describe, expect, it, vi } from "vitest";
import { spawnSync } from "node:child_process";
import { join } from "node:path";

const root = join(import.meta.dirname, "..");

// Each test spawns the kit's CLI, some several times in a row: a node process that loads the kit.
// On a loaded CI host one start took over 10 s, and the package's 60 s per test ran out on a test
// whose every run exits 2 at once. A hung CLI still fails: each spawn is killed at 240 s.
vi.setConfig({ testTimeout: 300_000 });

function cli(args: string[], loader = false, env: Record<string, string> = {}) {
  const started = performance.now();
  const run = spawnSync(process.execPath, [...(loader ? ["--import", "tsx"] : []), "dist/cli.js", ...args], {
    cwd: root,
    encoding: "utf8",
    timeout: 240_000,
    // The kit's own variables come from each test, never from the shell that runs the suite.
    env: { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("CONFORMANCE_"))), ...env },
  });
  return { code: run.status, signal: run.signal, stdout: run.stdout, stderr: run.stderr, ms: performance.now() - started };
}

describe("dispatch-once-conformance CLI", () => {
  it("certifies the in-memory ledger: exit 0, every applicable rule passes", () => {
    const { code, stdout, stderr } = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "ledger", "--runs", "60", "--seed", "11"]);
    expect(stderr).toContain("✓ LEDGER-1 exactly one of 64 concurrent claims of one key wins");
    expect(stderr).toContain("(not applicable: needs corruption (raw.corrupt))");
    expect(stdout).toContain("Dispatch-Once conformance: ledger-memory (levels: ledger, seed 11, 60 runs)");
    expect(stdout).toMatch(/LEDGER-11\s+MUST\s+n\/a/);
    expect(stdout).toContain("CONFORMS: 36 rules pass, 3 not applicable by declared capabilities");
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

  it("rejects a ledger without fencing and replays the same case from the printed path, with the same timeline", () => {
    const first = cli(["--adapter", "test/fixtures/no-fencing-subject.ts", "--level", "ledger", "--runs", "100", "--seed", "5", "--only", "model-based", "--json", "--quiet"], true);
    expect(first.code).toBe(1);
    const cx = JSON.parse(first.stdout).checks[0].counterexample;
    const again = cli(["--adapter", "test/fixtures/no-fencing-subject.ts", "--level", "ledger", "--seed", "5", "--path", cx.path, "--only", "model-based", "--json", "--quiet"], true);
    expect(again.code).toBe(1);
    const replayed = JSON.parse(again.stdout).checks[0];
    expect(replayed.name).toContain(`replay of path ${cx.path}`);
    // Exactly that case: the same path (no further shrinking under a new one) and the same steps.
    expect(replayed.counterexample.path).toBe(cx.path);
    expect(replayed.counterexample.timeline).toEqual(cx.timeline);
  });
});

describe("the CLI fails closed", () => {
  const limits = ["--check-timeout", "1000", "--timeout", "30000"];

  it("an adapter whose promises never resolve (a pool deadlock keeping the process alive) fails at the ledger level within a bounded time, naming the rule and the pending calls", () => {
    const run = cli(["--adapter", "test/fixtures/hung-subject.mjs", "--level", "ledger", ...limits]);
    expect(run.code).toBe(1);
    // Three checks of 1 s each time out, then the rest fail as not run; plus start-up.
    expect(run.ms).toBeLessThan(20_000);
    expect(run.stderr).toMatch(/✗ LEDGER-1 exactly one of 64 concurrent claims of one key wins\n\s+LEDGER-1 timed out after \d+ ms \(its time limit is 1000 ms\)/);
    expect(run.stderr).toMatch(/pending when it was stopped:\n\s+fixture#1\/ledger#1\.claim\(key [0-9a-f]{8}, owner racer-0, keyed_write, leaseMs 600000\) pending for \d+ ms/);
    expect(run.stdout).toContain("not run: 3 checks in a row did not finish, so the subject is taken to be hung");
    expect(run.stdout).toContain("DOES NOT CONFORM:");
  });

  it("an adapter that never calls back (nothing left in the event loop) fails at once instead of exiting 0 with no report", () => {
    const run = cli(["--adapter", "test/fixtures/silent-subject.mjs", "--level", "ledger", ...limits]);
    expect(run.code).toBe(1);
    expect(run.ms).toBeLessThan(15_000);
    expect(run.stderr).toContain("LEDGER-1 did not finish and never can");
    expect(run.stderr).toContain("pending when it was stopped:");
    expect(run.stdout).toContain("DOES NOT CONFORM:");
  });

  it("an adapter that throws on every call fails every applicable check, with the error", () => {
    const run = cli(["--adapter", "test/fixtures/throwing-subject.mjs", "--level", "ledger", "--runs", "5", ...limits, "--quiet"]);
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/LEDGER-1\s+MUST\s+FAIL/);
    expect(run.stdout).toContain("claim: cannot read properties of undefined (reading 'query')");
    expect(run.stdout).not.toContain("not run:");
  });

  it("the run's own time limit stops a run whose checks are each within theirs, and the rest fail as not run", () => {
    const run = cli(["--adapter", "test/fixtures/hung-subject.mjs", "--level", "ledger", "--check-timeout", "5000", "--timeout", "2000", "--quiet"]);
    expect(run.code).toBe(1);
    expect(run.ms).toBeLessThan(15_000);
    expect(run.stdout).toContain("the run's time limit of 2000 ms was reached");
  });

  it("--only LEDGER-1 runs LEDGER-1's checks only, not LEDGER-10..30's; an id no check has exits 2 with one line naming it", () => {
    const run = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "ledger", "--runs", "5", "--seed", "3", "--only", "LEDGER-1", "--json", "--quiet"]);
    expect(run.code, run.stderr).toBe(0);
    expect([...new Set(JSON.parse(run.stdout).checks.map((c: { rule: string }) => c.rule))]).toEqual(["LEDGER-1"]);
    // Ids are matched without regard to case, as the rule ids are written in the spec.
    const lower = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "ledger", "--runs", "5", "--seed", "3", "--only", "ledger-1", "--json", "--quiet"]);
    expect(JSON.parse(lower.stdout).checks.map((c: { name: string }) => c.name)).toEqual(JSON.parse(run.stdout).checks.map((c: { name: string }) => c.name));
    for (const [only, says] of [
      ["LEDGER-99", "--only LEDGER-99: no check of the ledger level has rule LEDGER-99"],
      ["TURN-5", "--only TURN-5: no check of the ledger level has rule TURN-5"],
      ["TURN-*", "--only TURN-*: no check of the ledger level has a rule that TURN-* matches"],
      ["no such check", '--only "no such check": no check of the ledger level has a name that contains it'],
    ]) {
      const none = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "ledger", "--only", only!, "--quiet"]);
      expect(none.code, none.stderr).toBe(2);
      expect(none.stderr.trimEnd().split("\n"), none.stderr).toEqual([`dispatch-once-conformance: ${says}`]);
    }
    const empty = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "ledger", "--only", ""]);
    expect(empty.code).toBe(2);
    expect(empty.stderr).toContain("--only needs a rule id (LEDGER-7), a pattern of rule ids ('LEDGER-*') or a part of a check's name");
  });

  it("--path replays exactly one case, also when that case passes", () => {
    const run = cli(["--adapter", "test/fixtures/counting-memory-subject.mjs", "--level", "ledger", "--seed", "5", "--path", "3:0", "--only", "model-based", "--quiet"]);
    expect(run.code).toBe(0);
    expect(run.stderr).toMatch(/counted: 1 fixtures/);
    expect(run.stdout).toContain("seed 5, path 3:0");
  });

  it("--path must select exactly one property", () => {
    const run = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "ledger", "--seed", "5", "--path", "3"]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("--path replays one case of one property, but 3 checks are selected");
  });

  it("--seed fixes every random choice, keys included: the same seed claims the same keys, another seed others", () => {
    const keys = (seed: string) => {
      const run = cli(["--adapter", "test/fixtures/counting-memory-subject.mjs", "--level", "ledger", "--seed", seed, "--runs", "3", "--only", "LEDGER-21", "--quiet"]);
      expect(run.code).toBe(0);
      return /counted: \d+ fixtures, keys ([0-9a-f]{16})/.exec(run.stderr)?.[1];
    };
    const a = keys("41");
    expect(a).toBeDefined();
    expect(keys("41")).toBe(a);
    expect(keys("42")).not.toBe(a);
  });

  it("reads CONFORMANCE_RUNS and CONFORMANCE_SEED as the API does, and refuses a variable that is not an integer (CONFORMANCE_E2E_RUNS: conformance-e2e's CLI tests)", () => {
    const ledger = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "ledger", "--only", "model-based", "--json", "--quiet"], false, { CONFORMANCE_RUNS: "7", CONFORMANCE_SEED: "99" });
    expect(ledger.code).toBe(0);
    const l = JSON.parse(ledger.stdout);
    expect(l).toMatchObject({ seed: 99, runs: 7, runsByLevel: { ledger: 7 } });
    expect(l.checks[0].name).toContain("(7 runs, seed 99)");
    const bad = cli(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "ledger"], false, { CONFORMANCE_RUNS: "many" });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("CONFORMANCE_RUNS must be an integer");
  });
});

describe("dispatch-once-conformance --store: the conversation-store level from the command line", () => {
  const memory = "test/fixtures/store/memory-store-subject.mjs";
  const noFence = "test/fixtures/store/no-fence-store-subject.ts";

  it("certifies the in-memory conversation store: exit 0, the report names the level, the n/a capabilities and the runs", () => {
    const { code, stdout, stderr } = cli(["--store", memory, "--level", "conversation", "--runs", "10", "--seed", "11"]);
    expect(stderr).toMatch(/✓ TURN-5 model-based: .* \(10 runs, seed 11\)/);
    expect(stderr).toContain("(not applicable: needs corruption (raw.corrupt))");
    expect(stdout).toContain("Dispatch-Once conformance: conversation-memory (levels: conversation, seed 11, 10 runs)");
    expect(stdout).toMatch(/TURN-5\s+MUST\s+pass/);
    expect(stdout).toMatch(/CONFORMS: \d+ rules pass/);
    expect(code).toBe(0);
  });

  it("--json and --only: the report of the checks selected, as for a ledger", () => {
    const { code, stdout } = cli(["--store", memory, "--level", "conversation", "--runs", "5", "--seed", "3", "--only", "TURN-2", "--json", "--quiet"]);
    expect(code).toBe(0);
    const report = JSON.parse(stdout);
    expect(report).toMatchObject({ subject: "conversation-memory", conforms: true, seed: 3, levels: ["conversation"] });
    expect(report.checks.length).toBeGreaterThan(0);
    // A rule id is matched exactly: TURN-2 is not a prefix of TURN-21's checks.
    expect([...new Set(report.checks.map((c: { rule: string }) => c.rule))]).toEqual(["TURN-2"]);
  });

  it("--only with a * selects the rules the pattern matches: TURN-2* is TURN-2 and TURN-20..29", () => {
    const { code, stdout } = cli(["--store", memory, "--level", "conversation", "--runs", "5", "--seed", "3", "--only", "TURN-2*", "--json", "--quiet"]);
    expect(code).toBe(0);
    const rules = [...new Set(JSON.parse(stdout).checks.map((c: { rule: string }) => c.rule))].sort();
    expect(rules).toEqual(["TURN-2", "TURN-21", "TURN-22", "TURN-24"]);
  });

  it("rejects a store whose commit ignores the fence: exit 1, TURN-5, a timeline, and a replay command that replays the same case", () => {
    const { code, stdout } = cli(["--store", noFence, "--level", "conversation", "--runs", "50", "--seed", "5", "--only", "TURN-5", "--quiet"], true);
    expect(code).toBe(1);
    expect(stdout).toMatch(/TURN-5\s+MUST\s+FAIL/);
    expect(stdout).toContain("DOES NOT CONFORM:");
    expect(stdout).toMatch(/\n {4}t=1 [^\n]+\n/);
    const replay = /replay: pnpm conformance --store (\S+) --level conversation --seed 5 --path (\S+) --only (model-based:)/.exec(stdout);
    expect(replay, stdout).not.toBeNull();
    expect(replay![1]).toBe(noFence);
    const timeline = (out: string) => /counterexample \(shrunk\), one step per line:\n((?: {4}.*\n)+)/.exec(out)?.[1]?.replace(/model-[0-9a-f]{8}-/g, "model-*-");

    // The printed command, run as printed: exactly that case, once, with the same steps.
    const again = cli(["--store", replay![1]!, "--level", "conversation", "--seed", "5", "--path", replay![2]!, "--only", replay![3]!, "--quiet"], true);
    expect(again.code).toBe(1);
    expect(again.stdout).toContain(`seed 5, path ${replay![2]}`);
    expect(again.stdout).toContain(`replay of path ${replay![2]}`);
    expect(again.stdout).not.toContain("8 concurrent commits");
    expect(timeline(again.stdout)).toBeDefined();
    expect(timeline(again.stdout)).toBe(timeline(stdout));
  });

  it("a store whose promises never resolve (a pool deadlock keeping the process alive) fails within a bounded time, naming the rule and the store calls pending", () => {
    const run = cli(["--store", "test/fixtures/store/hung-store-subject.mjs", "--level", "conversation", "--check-timeout", "1000", "--timeout", "30000"]);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/✗ TURN-1 [^\n]+\n\s+TURN-1 timed out after \d+ ms \(its time limit is 1000 ms\)/);
    expect(run.stderr).toMatch(/pending when it was stopped:\n\s+fixture#\d+\/store#1\.\w+\([^)]*\) pending for \d+ ms/);
    expect(run.stdout).toContain("not run: 3 checks in a row did not finish, so the subject is taken to be hung");
    expect(run.stdout).toContain("DOES NOT CONFORM:");
  });

  it("bad inputs exit 2 with one line saying what is wrong", () => {
    const oneLine = (args: string[], expected: string) => {
      const run = cli(args);
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(expected);
      expect(run.stderr.trimEnd().split("\n"), run.stderr).toHaveLength(1);
    };
    // --level conversation: the e2e level, where installed, is not loaded (it starts the mocks' modules).
    const level = ["--level", "conversation"];
    oneLine(["--store", "test/fixtures/store/does-not-exist.mjs", ...level], "cannot load --store test/fixtures/store/does-not-exist.mjs");
    oneLine(["--store", "test/fixtures/store/no-default-store.mjs", ...level], "--store test/fixtures/store/no-default-store.mjs has no default export");
    oneLine(["--store", "test/fixtures/store/no-create-store.mjs", ...level], "is not a ConversationStoreSubject: `create` must be a function");
    // A ledger subject has the same top-level shape: its fixture gives it away.
    oneLine(["--store", "test/fixtures/memory-subject.mjs", ...level], "create() returned a fixture without `store` (the ConversationStore under test): it has `ledger`");
    oneLine(["--adapter", "test/fixtures/memory-subject.mjs", "--store", memory], "give --adapter (a ledger) or --store (a conversation store), not both");
    oneLine(["--store", memory, "--level", "ledger"], "the ledger level certifies a ledger adapter (--adapter)");
    oneLine(["--adapter", "test/fixtures/memory-subject.mjs", "--level", "conversation"], "the conversation level certifies a conversation store (--store)");
    oneLine(["--store", memory, "--vectors", "x.json"], "--vectors are ledger-transition vectors");
  });
});
