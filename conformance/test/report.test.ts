import { describe, expect, it } from "vitest";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import {
  MATRIX_END,
  MATRIX_START,
  patchComplianceMatrix,
  renderComplianceMatrix,
  renderReportTable,
  runChecks,
  summarizeRules,
  failedCase,
  type Check,
  type CheckResult,
} from "../src/index.js";

const ok = (rule: string, name: string): Check => ({ rule, name, applicable: true, run: async () => {} });
const bad = (rule: string, name: string): Check => ({
  rule,
  name,
  applicable: true,
  run: async () => {
    throw new Error("boom");
  },
});
const na = (rule: string, name: string): Check => ({ rule, name, applicable: false, reasonNotApplicable: "needs x", run: async () => {} });

describe("per-rule summary", () => {
  it("a rule passes only when all its checks pass, fails on any failure, and is n/a when none ran", async () => {
    const report = await runChecks([ok("LEDGER-1", "a"), bad("LEDGER-1", "b"), ok("LEDGER-2", "c"), na("LEDGER-2", "d"), na("LEDGER-11", "e")], { subject: "s" });
    const by = Object.fromEntries(report.rules.map((r) => [r.rule, r]));
    expect(by["LEDGER-1"]).toMatchObject({ status: "fail", passed: 1, failed: 1 });
    expect(by["LEDGER-2"]).toMatchObject({ status: "pass", passed: 1, notApplicable: 1 });
    expect(by["LEDGER-11"]).toMatchObject({ status: "not_applicable" });
    expect(report.conforms).toBe(false);
    expect(report.checks.find((c) => c.name === "b")?.error).toContain("boom");
    expect(renderReportTable(report)).toContain("DOES NOT CONFORM: LEDGER-1");
  });

  it("a failing check's `violates` fails that rule too", () => {
    const results: CheckResult[] = [
      { rule: "LEDGER-3", name: "model", status: "fail", violates: ["LEDGER-5"] },
      { rule: "LEDGER-5", name: "direct", status: "pass" },
    ];
    const rules = summarizeRules(results);
    expect(rules.map((r) => [r.rule, r.status])).toEqual([
      ["LEDGER-3", "fail"],
      ["LEDGER-5", "fail"],
    ]);
  });

  it("orders rules numerically (LEDGER-2 before LEDGER-10)", async () => {
    const report = await runChecks([ok("LEDGER-10", "x"), ok("LEDGER-2", "y")], { subject: "s" });
    expect(report.rules.map((r) => r.rule)).toEqual(["LEDGER-2", "LEDGER-10"]);
  });
});

describe("a property stopped by its time limit", () => {
  // What an end-to-end certification cut off by its limit throws (failedCase, as every level's properties).
  const interrupted = (rule: string): Check => ({
    rule,
    name: "end to end",
    applicable: true,
    run: async () => void failedCase({ kind: "interrupted", numRuns: 7, timeLimitMs: 3_600 }, "end-to-end property", 20),
  });

  it("is reported interrupted (nothing violated, nothing certified), not as a failure of its rule", async () => {
    const report = await runChecks([interrupted("CONF-2"), ok("LEDGER-1", "a")], { subject: "s" });
    const check = report.checks.find((c) => c.rule === "CONF-2")!;
    expect(check).toMatchObject({ status: "fail", interrupted: true });
    expect(check.error).toMatch(/interrupted by its time limit \(3600 ms\) after 7 of 20 runs: an interrupted run certifies nothing \(interrupted, not violated: none of the 7 runs made broke a rule\)/);
    // Fail closed: an interrupted certification certifies nothing.
    expect(report.conforms).toBe(false);
    expect(report.rules.find((r) => r.rule === "CONF-2")).toMatchObject({ status: "fail", failed: 1, interrupted: 1 });
    const table = renderReportTable(report);
    expect(table).toMatch(/CONF-2 +MUST +FAIL +0 pass, 1 interrupted  /);
    expect(table).toContain("DOES NOT CONFORM: CONF-2 interrupted by its time limit (no violation found; not certified)");
    expect(table).not.toContain("CONF-2 failed");
  });

  it("a rule with a violation beside an interrupted check is reported failed", async () => {
    const report = await runChecks([interrupted("CONF-2"), bad("CONF-2", "b"), bad("LEDGER-1", "c")], { subject: "s" });
    expect(report.rules.find((r) => r.rule === "CONF-2")).toMatchObject({ status: "fail", failed: 2, interrupted: 1 });
    const table = renderReportTable(report);
    expect(table).toMatch(/CONF-2 +MUST +FAIL +0 pass, 1 fail, 1 interrupted  /);
    expect(table).toContain("DOES NOT CONFORM: LEDGER-1, CONF-2 failed");
  });
});

describe("compliance matrix", () => {
  it("renders rules as rows and subjects as columns", async () => {
    const a = await runChecks([ok("LEDGER-1", "a"), na("LEDGER-11", "b")], { subject: "ledger-memory" });
    const b = await runChecks([bad("LEDGER-1", "a"), ok("LEDGER-11", "b")], { subject: "ledger-broken" });
    const matrix = renderComplianceMatrix({ "ledger-memory": a, "ledger-broken": b });
    const lines = matrix.split("\n");
    expect(lines[0]).toBe("| Rule | Level | ledger-memory | ledger-broken |");
    expect(lines.find((l) => l.startsWith("| [LEDGER-1](#LEDGER-1) "))).toMatch(/\| MUST \| ✅ \| ❌ \|$/);
    expect(lines.find((l) => l.startsWith("| [LEDGER-11](#LEDGER-11) "))).toMatch(/\| n\/a \| ✅ \|$/);
    expect(lines.at(-1)).toBe("| **Conforms (CONF-1)** | | ✅ | ❌ |");
  });

  it("patches only the text between the markers and refuses a file without them", () => {
    const doc = `# Spec\n\nbefore\n${MATRIX_START}\nold\n${MATRIX_END}\nafter\n`;
    expect(patchComplianceMatrix(doc, "| new |")).toBe(`# Spec\n\nbefore\n${MATRIX_START}\n| new |\n${MATRIX_END}\nafter\n`);
    expect(() => patchComplianceMatrix("# no markers", "x")).toThrow(/markers/);
  });

  it("scripts/compliance-matrix.mjs patches a copy of the spec README from JSON reports", async () => {
    const dir = mkdtempSync(join(tmpdir(), "matrix-"));
    try {
      const memory = await runChecks([ok("LEDGER-1", "a"), na("LEDGER-12", "b")], { subject: "ledger-memory" });
      const pg = await runChecks([ok("LEDGER-1", "a"), ok("LEDGER-12", "b")], { subject: "ledger-postgres" });
      writeFileSync(join(dir, "memory.json"), JSON.stringify(memory));
      writeFileSync(join(dir, "pg.json"), JSON.stringify(pg));
      const readme = join(dir, "README.md");
      writeFileSync(readme, `intro\n${MATRIX_START}\n${MATRIX_END}\noutro\n`);
      const run = spawnSync(process.execPath, ["scripts/compliance-matrix.mjs", "--spec", readme, join(dir, "memory.json"), join(dir, "pg.json")], { encoding: "utf8" });
      expect(run.stderr).toBe("");
      expect(run.status).toBe(0);
      const patched = readFileSync(readme, "utf8");
      expect(patched).toContain("| Rule | Level | ledger-memory | ledger-postgres |");
      expect(patched).toMatch(/\| \[LEDGER-12\]\(#LEDGER-12\) [^\n]*\| n\/a \| ✅ \|/);
      expect(patched.startsWith("intro\n")).toBe(true);
      expect(patched.endsWith("outro\n")).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
