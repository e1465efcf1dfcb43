import { ConformanceFailure, describeError } from "./failure.js";
import { compareRuleIds, ruleInfo } from "./rules.js";
import type { Check, CheckResult, CheckStatus, Report, RuleSummary } from "./types.js";

export interface RunChecksOptions {
  subject: string;
  levels?: string[];
  seed?: number;
  runs?: number;
  /** Called after each check, e.g. to print progress. */
  onResult?: (result: CheckResult) => void;
}

/** Runs checks one after another (they share one store) and collects a report. */
export async function runChecks(checks: readonly Check[], options: RunChecksOptions): Promise<Report> {
  const startedAt = new Date().toISOString();
  const results: CheckResult[] = [];
  for (const check of checks) {
    const result = await runCheck(check);
    results.push(result);
    options.onResult?.(result);
  }
  const rules = summarizeRules(results);
  return {
    subject: options.subject,
    levels: options.levels ?? ["ledger"],
    ...(options.seed === undefined ? {} : { seed: options.seed }),
    ...(options.runs === undefined ? {} : { runs: options.runs }),
    startedAt,
    finishedAt: new Date().toISOString(),
    conforms: conforms(rules),
    rules,
    checks: results,
  };
}

export async function runCheck(check: Check): Promise<CheckResult> {
  if (!check.applicable) {
    return {
      rule: check.rule,
      name: check.name,
      status: "not_applicable",
      reasonNotApplicable: check.reasonNotApplicable ?? "capability not declared",
    };
  }
  const started = performance.now();
  try {
    await check.run();
    return { rule: check.rule, name: check.name, status: "pass", durationMs: Math.round(performance.now() - started) };
  } catch (error) {
    const result: CheckResult = {
      rule: check.rule,
      name: check.name,
      status: "fail",
      error: error instanceof ConformanceFailure ? error.message : describeError(error),
      durationMs: Math.round(performance.now() - started),
    };
    if (error instanceof ConformanceFailure) {
      if (error.counterexample !== undefined) result.counterexample = error.counterexample;
      if (error.violates !== undefined && error.violates !== check.rule) result.violates = [error.violates];
    }
    return result;
  }
}

/**
 * Per-rule verdict: a rule fails when any of its checks fails (or a failing check names it in
 * `violates`), passes when at least one check ran and all passed, and is not applicable when
 * every check was excluded by the subject's capabilities.
 */
export function summarizeRules(results: readonly CheckResult[]): RuleSummary[] {
  const ids = new Set<string>();
  for (const r of results) {
    ids.add(r.rule);
    for (const v of r.violates ?? []) ids.add(v);
  }
  return [...ids].sort(compareRuleIds).map((id) => {
    const own = results.filter((r) => r.rule === id);
    const passed = own.filter((r) => r.status === "pass").length;
    const notApplicable = own.filter((r) => r.status === "not_applicable").length;
    const failed =
      own.filter((r) => r.status === "fail").length +
      results.filter((r) => r.rule !== id && r.status === "fail" && (r.violates ?? []).includes(id)).length;
    const status: CheckStatus = failed > 0 ? "fail" : passed > 0 ? "pass" : "not_applicable";
    const info = ruleInfo(id);
    return { rule: id, title: info.title, requirement: info.requirement, status, passed, failed, notApplicable };
  });
}

/** Conformance (CONF-1): no MUST rule fails; rules excluded by capabilities do not count. */
export function conforms(rules: readonly RuleSummary[]): boolean {
  return rules.every((r) => r.requirement !== "MUST" || r.status !== "fail");
}

const STATUS_WORD: Record<CheckStatus, string> = { pass: "pass", fail: "FAIL", not_applicable: "n/a" };

/** The per-rule summary as a plain-text table. */
export function renderReportTable(report: Report): string {
  const header = ["rule", "req", "status", "checks", "title"];
  const rows = report.rules.map((r) => [
    r.rule,
    r.requirement,
    STATUS_WORD[r.status],
    `${r.passed} pass${r.failed ? `, ${r.failed} fail` : ""}${r.notApplicable ? `, ${r.notApplicable} n/a` : ""}`,
    r.title,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  const meta = [
    `levels: ${report.levels.join(", ")}`,
    report.seed === undefined ? undefined : `seed ${report.seed}`,
    report.runs === undefined ? undefined : `${report.runs} runs`,
  ].filter(Boolean);
  const failing = report.rules.filter((r) => r.status === "fail").map((r) => r.rule);
  const na = report.rules.filter((r) => r.status === "not_applicable").length;
  const passing = report.rules.filter((r) => r.status === "pass").length;
  const verdict = report.conforms
    ? `CONFORMS: ${passing} rules pass, ${na} not applicable by declared capabilities`
    : `DOES NOT CONFORM: ${failing.join(", ")} failed`;
  return [
    `Dispatch-Once conformance: ${report.subject} (${meta.join(", ")})`,
    "",
    line(header),
    line(widths.map((w) => "-".repeat(w))),
    ...rows.map(line),
    "",
    verdict,
  ].join("\n");
}

export function renderReportJson(report: Report): string {
  return JSON.stringify(report, null, 2);
}

/** One line per check, for a verbose listing. */
export function renderCheckList(report: Report): string {
  return report.checks
    .map((c) => {
      const mark = c.status === "pass" ? "✓" : c.status === "fail" ? "✗" : "-";
      const tail = c.status === "not_applicable" ? ` (not applicable: ${c.reasonNotApplicable})` : "";
      return `${mark} ${c.rule} ${c.name}${tail}`;
    })
    .join("\n");
}

/**
 * Every failing check with its error and, for property checks, the shrunk counterexample as a
 * timeline and how to replay it. `replay` turns a counterexample into a command line.
 */
export function renderFailures(
  report: Report,
  options: { replay?: (check: CheckResult) => string | undefined } = {},
): string {
  const parts: string[] = [];
  for (const c of report.checks.filter((r) => r.status === "fail")) {
    const cx = c.counterexample;
    // A counterexample's error message repeats the timeline printed below; keep its first line.
    const error = cx === undefined ? (c.error ?? "failed") : (c.error ?? "failed").split("\n")[0]!;
    const lines = [`✗ ${c.rule} ${c.name}`, indent(error)];
    if (cx !== undefined) {
      if (cx.violates !== undefined) lines.push(`  breaks ${cx.violates}: ${ruleInfo(cx.violates).title}`);
      lines.push("  counterexample (shrunk), one step per line:");
      lines.push(...cx.timeline.map((t) => `    ${t}`));
      lines.push(`  seed ${cx.seed}, path ${JSON.stringify(cx.path)}`);
      const command = options.replay?.(c);
      if (command !== undefined) lines.push(`  replay: ${command}`);
    }
    parts.push(lines.join("\n"));
  }
  return parts.join("\n\n");
}

function indent(text: string): string {
  return text
    .split("\n")
    .map((l) => `  ${l}`)
    .join("\n");
}

const CELL: Record<CheckStatus, string> = { pass: "✅", fail: "❌", not_applicable: "n/a" };

/** A Markdown table: rules as rows, subjects as columns, ✅ / ❌ / n/a (— when a subject did not run the rule). */
export function renderComplianceMatrix(reports: Record<string, Report>): string {
  const subjects = Object.keys(reports);
  const ids = new Set<string>();
  for (const s of subjects) for (const r of reports[s]!.rules) ids.add(r.rule);
  const sorted = [...ids].sort(compareRuleIds);
  const escape = (text: string) => text.replaceAll("|", "\\|");
  const lines = [
    `| Rule | Level | ${subjects.map(escape).join(" | ")} |`,
    `| --- | --- | ${subjects.map(() => ":---:").join(" | ")} |`,
  ];
  for (const id of sorted) {
    const cells = subjects.map((s) => {
      const summary = reports[s]!.rules.find((r) => r.rule === id);
      return summary === undefined ? "—" : CELL[summary.status];
    });
    const info = ruleInfo(id);
    // The matrix lives in the spec itself, next to the rules' anchors.
    const title = info.title === "" ? `[${id}](#${id})` : `[${id}](#${id}) ${escape(info.title)}`;
    lines.push(`| ${title} | ${info.requirement} | ${cells.join(" | ")} |`);
  }
  lines.push(
    `| **Conforms (CONF-1)** | | ${subjects.map((s) => (reports[s]!.conforms ? "✅" : "❌")).join(" | ")} |`,
  );
  return lines.join("\n");
}

export const MATRIX_START = "<!-- compliance-matrix:start -->";
export const MATRIX_END = "<!-- compliance-matrix:end -->";

/** Replaces the text between the compliance-matrix markers; throws when the markers are missing. */
export function patchComplianceMatrix(markdown: string, matrix: string): string {
  const start = markdown.indexOf(MATRIX_START);
  const end = markdown.indexOf(MATRIX_END);
  if (start === -1 || end === -1 || end < start) {
    throw new Error(`markers ${MATRIX_START} ... ${MATRIX_END} not found in order`);
  }
  return `${markdown.slice(0, start + MATRIX_START.length)}\n${matrix}\n${markdown.slice(end)}`;
}
