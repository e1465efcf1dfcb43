import { CheckInconclusive } from "./errors/check-inconclusive.js";
import { ConformanceFailure, describeError } from "./failure.js";
import { DEFAULT_CHECK_TIMEOUT_MS, DEFAULT_RUN_TIMEOUT_MS, MAX_CONSECUTIVE_TIMEOUTS } from "./ledger/defaults.js";
import { compareRuleIds, ruleInfo } from "./rules.js";
import type { Check, CheckResult, CheckStatus, Report, RuleSummary } from "./types.js";

export interface RunChecksOptions {
  subject: string;
  levels?: string[];
  seed?: number;
  runs?: number;
  runsByLevel?: Record<string, number>;
  /** The stream side the end-to-end level ran on (named in the report). */
  provider?: string;
  /** Called after each check, e.g. to print progress. */
  onResult?: (result: CheckResult) => void;
  /** Time limit of a check that declares none (Check.timeoutMs). Default DEFAULT_CHECK_TIMEOUT_MS (60 s). */
  checkTimeoutMs?: number;
  /** Time limit of the whole run; checks left when it is reached fail as "not run". Default DEFAULT_RUN_TIMEOUT_MS (1 h). */
  runTimeoutMs?: number;
  /** After this many timeouts in a row the rest fail as "not run" (the adapter is hung). Default 3. */
  maxConsecutiveTimeouts?: number;
}

/**
 * Runs checks one after another (they share one store) and collects a report. It fails closed: a
 * check that exceeds its time limit fails (naming what the subject still had pending), the run as
 * a whole has a time limit, and checks that could not run fail rather than vanish.
 */
export async function runChecks(checks: readonly Check[], options: RunChecksOptions): Promise<Report> {
  const startedAt = new Date().toISOString();
  const started = performance.now();
  const runLimit = options.runTimeoutMs ?? DEFAULT_RUN_TIMEOUT_MS;
  const maxTimeouts = options.maxConsecutiveTimeouts ?? MAX_CONSECUTIVE_TIMEOUTS;
  const results: CheckResult[] = [];
  let timeouts = 0;
  let stopped: string | undefined;
  for (const check of checks) {
    let result: CheckResult;
    if (stopped !== undefined && check.applicable) {
      result = { rule: check.rule, name: check.name, status: "fail", error: `not run: ${stopped}`, timedOut: "not_run" };
    } else {
      const left = runLimit - (performance.now() - started);
      result = await runCheck(check, { timeoutMs: check.timeoutMs ?? options.checkTimeoutMs ?? DEFAULT_CHECK_TIMEOUT_MS, runLeftMs: left, runTimeoutMs: runLimit });
      if (result.timedOut === "run") {
        stopped = `the run's time limit of ${runLimit} ms was reached`;
      } else if (result.timedOut !== undefined) {
        timeouts++;
        if (timeouts >= maxTimeouts) stopped = `${timeouts} checks in a row did not finish, so the subject is taken to be hung`;
      } else if (result.status !== "not_applicable") {
        timeouts = 0;
      }
    }
    results.push(result);
    options.onResult?.(result);
  }
  const rules = summarizeRules(results);
  return {
    subject: options.subject,
    levels: options.levels ?? ["ledger"],
    ...(options.seed === undefined ? {} : { seed: options.seed }),
    ...(options.runs === undefined ? {} : { runs: options.runs }),
    ...(options.runsByLevel === undefined ? {} : { runsByLevel: options.runsByLevel }),
    ...(options.provider === undefined ? {} : { provider: options.provider }),
    startedAt,
    finishedAt: new Date().toISOString(),
    conforms: conforms(rules),
    rules,
    checks: results,
  };
}

/** Pending operations listed in a timeout message; the rest are counted. */
const MAX_PENDING_SHOWN = 8;

type Settled = { kind: "ok" } | { kind: "error"; error: unknown } | { kind: "timeout"; why: "check" | "run" | "idle"; afterMs: number };

/**
 * Runs a check against its time limit. A check's promise that nothing can settle any more (Node's
 * event loop is empty: the adapter dropped a callback) is caught at once through 'beforeExit'
 * rather than left to end the process with no report and status 0; the timer is unref'd so that
 * it does not itself keep such a process alive.
 */
function settle(check: Check, limitMs: number, limitIsRun: boolean): Promise<Settled> {
  return new Promise<Settled>((resolve) => {
    const started = performance.now();
    let done = false;
    const hasProcess = typeof process !== "undefined" && typeof process.on === "function";
    const finish = (outcome: Settled) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (hasProcess) process.off("beforeExit", onIdle);
      resolve(outcome);
    };
    const timer = setTimeout(() => finish({ kind: "timeout", why: limitIsRun ? "run" : "check", afterMs: Math.round(performance.now() - started) }), Math.max(0, limitMs));
    (timer as { unref?: () => void }).unref?.();
    // Settle through setImmediate, a handle that keeps the loop alive: otherwise Node exits right after
    // this 'beforeExit' and the next check, whose promise may hang too, is never reported.
    const onIdle = () => setImmediate(() => finish({ kind: "timeout", why: "idle", afterMs: Math.round(performance.now() - started) }));
    if (hasProcess) process.on("beforeExit", onIdle);
    let running: Promise<void>;
    try {
      running = Promise.resolve(check.run());
    } catch (error) {
      running = Promise.reject(error);
    }
    running.then(
      () => finish({ kind: "ok" }),
      (error: unknown) => finish({ kind: "error", error }),
    );
  });
}

function timeoutMessage(check: Check, outcome: Extract<Settled, { kind: "timeout" }>, limits: { timeoutMs: number; runTimeoutMs?: number }): { message: string; pending: string[] } {
  const pending = check.pending?.() ?? [];
  const head =
    outcome.why === "idle"
      ? `did not finish and never can (after ${outcome.afterMs} ms): it waits on a promise and nothing is left in Node's event loop that could settle it (the subject dropped a callback, or returned a promise it never settles)`
      : outcome.why === "run"
        ? `stopped after ${outcome.afterMs} ms: the run's time limit of ${limits.runTimeoutMs} ms was reached while this check ran`
        : `timed out after ${outcome.afterMs} ms (its time limit is ${limits.timeoutMs} ms)`;
  const shown = pending.slice(0, MAX_PENDING_SHOWN).map((p) => `  ${p}`);
  if (pending.length > MAX_PENDING_SHOWN) shown.push(`  ... and ${pending.length - MAX_PENDING_SHOWN} more`);
  const lines = pending.length > 0 ? ["pending when it was stopped:", ...shown] : check.pending === undefined ? [] : ["nothing of the subject's was pending: the check itself waits on something else"];
  return { message: [`${check.rule} ${head}`, ...lines].join("\n"), pending };
}

/**
 * How many times a check that could not conclude (CheckInconclusive) is run in all, each on a fresh
 * fixture (a check's run() makes its own), before it is reported inconclusive (CONF-5).
 */
export const INCONCLUSIVE_ATTEMPTS = 3;

/** The error text of a check that could not conclude on any attempt. */
function inconclusiveMessage(reasons: readonly string[]): string {
  const attempts = reasons.length;
  const last = reasons.at(-1) ?? "";
  return `inconclusive (no violation found; not certified) after ${attempts} attempt${attempts === 1 ? "" : "s"}: ${last}`;
}

/**
 * Runs one check. `timeoutMs` is its own limit; `runLeftMs` what is left of the run's (the
 * smaller one applies, and the result says which was reached). A run that could not conclude
 * (CheckInconclusive) is run again, up to INCONCLUSIVE_ATTEMPTS in all, each with its own limit
 * inside what is left of the run's; the result is the last run's, and names the earlier ones.
 */
export async function runCheck(check: Check, limits: { timeoutMs?: number; runLeftMs?: number; runTimeoutMs?: number } = {}): Promise<CheckResult> {
  if (!check.applicable) {
    return {
      rule: check.rule,
      name: check.name,
      status: "not_applicable",
      reasonNotApplicable: check.reasonNotApplicable ?? "capability not declared",
    };
  }
  const timeoutMs = limits.timeoutMs ?? check.timeoutMs ?? DEFAULT_CHECK_TIMEOUT_MS;
  const started = performance.now();
  const reasons: string[] = [];
  for (;;) {
    const runLeftMs = limits.runLeftMs === undefined ? undefined : limits.runLeftMs - (performance.now() - started);
    const result = await runOnce(check, timeoutMs, runLeftMs, limits.runTimeoutMs);
    if (result.inconclusive !== undefined) reasons.push(result.inconclusive);
    const again = result.inconclusive !== undefined && reasons.length < INCONCLUSIVE_ATTEMPTS && (runLeftMs === undefined || runLeftMs - result.base.durationMs! > 0);
    if (again) continue;
    const base: CheckResult = { ...result.base, durationMs: Math.round(performance.now() - started) };
    if (result.inconclusive !== undefined) {
      base.status = "inconclusive";
      base.error = inconclusiveMessage(reasons);
    }
    const attempts = reasons.length + (result.inconclusive === undefined ? 1 : 0);
    if (attempts > 1) base.attempts = attempts;
    if (reasons.length > 0) base.inconclusiveRuns = reasons;
    return base;
  }
}

/** One run of an applicable check; `inconclusive` is set when it could not conclude (then `base` is a fail to be relabelled). */
async function runOnce(check: Check, timeoutMs: number, runLeftMs: number | undefined, runTimeoutMs: number | undefined): Promise<{ base: CheckResult; inconclusive?: string }> {
  const runBound = runLeftMs !== undefined && runLeftMs < timeoutMs;
  const started = performance.now();
  const outcome = await settle(check, runBound ? Math.max(0, runLeftMs) : timeoutMs, runBound);
  const durationMs = Math.round(performance.now() - started);
  if (outcome.kind === "ok") return { base: { rule: check.rule, name: check.name, status: "pass", durationMs } };
  if (outcome.kind === "timeout") {
    const { message, pending } = timeoutMessage(check, outcome, { timeoutMs, ...(runTimeoutMs === undefined ? {} : { runTimeoutMs }) });
    return { base: { rule: check.rule, name: check.name, status: "fail", error: message, durationMs, timedOut: outcome.why, ...(pending.length > 0 ? { pending } : {}) } };
  }
  const error = outcome.error;
  const result: CheckResult = {
    rule: check.rule,
    name: check.name,
    status: "fail",
    error: ConformanceFailure.isInstance(error) || CheckInconclusive.isInstance(error) ? error.message : describeError(error),
    durationMs,
  };
  if (CheckInconclusive.isInstance(error)) return { base: result, inconclusive: error.message };
  if (ConformanceFailure.isInstance(error)) {
    if (error.counterexample !== undefined) result.counterexample = error.counterexample;
    if (error.violates !== undefined && error.violates !== check.rule) result.violates = [error.violates];
    // Only a failure of another copy of the kit of before lacks the field (undefined, not interrupted).
    if (error.interrupted !== undefined) result.interrupted = true;
  }
  return { base: result };
}

/**
 * A check's run() bound to its time limit, for test runners (registerChecks): resolves when the
 * check passes, rejects with the check's failure, or with a ConformanceFailure naming what was
 * pending when the limit was reached. A run that could not conclude is run again as runCheck does;
 * still inconclusive, it rejects with a CheckInconclusive saying so (the test fails: not certified).
 */
export async function runWithTimeLimit(check: Check, timeoutMs: number): Promise<void> {
  const reasons: string[] = [];
  for (;;) {
    const outcome = await settle(check, timeoutMs, false);
    if (outcome.kind === "ok") return;
    if (outcome.kind === "timeout") throw new ConformanceFailure(timeoutMessage(check, outcome, { timeoutMs }).message);
    if (!CheckInconclusive.isInstance(outcome.error)) throw outcome.error;
    reasons.push(outcome.error.message);
    if (reasons.length >= INCONCLUSIVE_ATTEMPTS) throw new CheckInconclusive(`${check.rule} ${inconclusiveMessage(reasons)}`, { cause: outcome.error });
  }
}

/**
 * Per-rule verdict: a rule fails when any of its checks fails (or a failing check names it in
 * `violates`); else is inconclusive when any of its checks could not conclude (CONF-5: no
 * violation found, not certified); passes when at least one check ran and all passed; and is not
 * applicable when every check was excluded by the subject's capabilities.
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
    // An interrupted check fails its rule (it certifies nothing) but is counted apart: it broke nothing.
    const interrupted = own.filter((r) => r.status === "fail" && r.interrupted === true).length;
    const inconclusive = own.filter((r) => r.status === "inconclusive").length;
    const status: CheckStatus = failed > 0 ? "fail" : inconclusive > 0 ? "inconclusive" : passed > 0 ? "pass" : "not_applicable";
    const info = ruleInfo(id);
    return { rule: id, title: info.title, requirement: info.requirement, status, passed, failed, notApplicable, ...(interrupted > 0 ? { interrupted } : {}), ...(inconclusive > 0 ? { inconclusive } : {}) };
  });
}

/**
 * Conformance (CONF-1): no MUST rule fails, and none is inconclusive (CONF-5: it was not
 * certified); rules excluded by capabilities do not count.
 */
export function conforms(rules: readonly RuleSummary[]): boolean {
  return rules.every((r) => r.requirement !== "MUST" || (r.status !== "fail" && r.status !== "inconclusive"));
}

const STATUS_WORD: Record<CheckStatus, string> = { pass: "pass", fail: "FAIL", inconclusive: "INCONCLUSIVE", not_applicable: "n/a" };

/** The per-rule summary as a plain-text table. */
export function renderReportTable(report: Report): string {
  const header = ["rule", "req", "status", "checks", "title"];
  const rows = report.rules.map((r) => {
    const interrupted = r.interrupted ?? 0;
    const violated = r.failed - interrupted;
    return [
      r.rule,
      r.requirement,
      STATUS_WORD[r.status],
      `${r.passed} pass${violated ? `, ${violated} fail` : ""}${interrupted ? `, ${interrupted} interrupted` : ""}${r.inconclusive ? `, ${r.inconclusive} inconclusive` : ""}${r.notApplicable ? `, ${r.notApplicable} n/a` : ""}`,
      r.title,
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  const meta = [
    `levels: ${report.levels.join(", ")}`,
    report.seed === undefined ? undefined : `seed ${report.seed}`,
    report.runsByLevel !== undefined && Object.keys(report.runsByLevel).length > 1
      ? Object.entries(report.runsByLevel)
          .map(([level, runs]) => `${level} ${runs} runs`)
          .join(", ")
      : report.runs === undefined
        ? undefined
        : `${report.runs} runs`,
    report.provider === undefined ? undefined : `provider ${report.provider}`,
  ].filter(Boolean);
  // A rule whose only failing checks were stopped by their time limit was not violated: the verdict
  // says so rather than "failed" (it still does not conform: nothing was certified).
  const onlyInterrupted = (r: RuleSummary) => r.failed > 0 && r.failed === (r.interrupted ?? 0);
  const failing = report.rules.filter((r) => r.status === "fail" && !onlyInterrupted(r)).map((r) => r.rule);
  const stopped = report.rules.filter((r) => r.status === "fail" && onlyInterrupted(r)).map((r) => r.rule);
  // A rule none of whose checks failed but one could not conclude (CONF-5): not broken, not certified.
  const inconclusive = report.rules.filter((r) => r.status === "inconclusive" && r.requirement === "MUST").map((r) => r.rule);
  const na = report.rules.filter((r) => r.status === "not_applicable").length;
  const passing = report.rules.filter((r) => r.status === "pass").length;
  const verdict = report.conforms
    ? `CONFORMS: ${passing} rules pass, ${na} not applicable by declared capabilities`
    : `DOES NOT CONFORM: ${[
        ...(failing.length > 0 ? [`${failing.join(", ")} failed`] : []),
        ...(stopped.length > 0 ? [`${stopped.join(", ")} interrupted by ${stopped.length === 1 ? "its time limit" : "their time limits"} (no violation found; not certified)`] : []),
        ...(inconclusive.length > 0 ? [`${inconclusive.join(", ")} inconclusive (no violation found; not certified)`] : []),
      ].join("; ")}`;
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
      const mark = c.status === "pass" ? "✓" : c.status === "fail" ? "✗" : c.status === "inconclusive" ? "?" : "-";
      const tail =
        c.status === "not_applicable"
          ? ` (not applicable: ${c.reasonNotApplicable})`
          : c.status === "inconclusive"
            ? ` (inconclusive after ${c.attempts ?? 1} attempts: no violation found; not certified)`
            : c.attempts !== undefined
              ? ` (passed on attempt ${c.attempts}: the earlier could not conclude)`
              : "";
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
  for (const c of report.checks.filter((r) => r.status === "inconclusive")) {
    // Not a violation: each attempt's reason, so the reader sees why the kit could not conclude.
    const lines = [`? ${c.rule} ${c.name}`, "  inconclusive (no violation found; not certified):"];
    for (const [i, reason] of (c.inconclusiveRuns ?? [c.error ?? ""]).entries()) lines.push(`    attempt ${i + 1}: ${reason.split("\n").join("\n      ")}`);
    parts.push(lines.join("\n"));
  }
  for (const c of report.checks.filter((r) => r.status === "fail")) {
    const cx = c.counterexample;
    // A counterexample's error message repeats the timeline printed below; keep its first line.
    const error = cx === undefined ? (c.error ?? "failed") : (c.error ?? "failed").split("\n")[0]!;
    const lines = [`✗ ${c.rule} ${c.name}`, indent(error)];
    if (cx !== undefined) {
      if (cx.violates !== undefined) lines.push(`  breaks ${cx.violates}: ${ruleInfo(cx.violates).title}`);
      lines.push("  counterexample (shrunk), one step per line:");
      lines.push(...cx.timeline.map((t) => `    ${t}`));
      // A case that passed when replayed is timing-dependent: say so, whatever produced it.
      const note = cx.note ?? (c.error ?? "").split("\n").find((l) => /passed on replay/.test(l))?.trim();
      if (note !== undefined) lines.push(`  note: ${note.replace(/^\((.*)\)$/, "$1")}`);
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

const CELL: Record<CheckStatus, string> = { pass: "✅", fail: "❌", inconclusive: "❔", not_applicable: "n/a" };

/** A Markdown table: rules as rows, subjects as columns, ✅ / ❌ / ❔ (inconclusive) / n/a (— when a subject did not run the rule). */
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
