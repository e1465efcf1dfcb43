#!/usr/bin/env node
import { isAbsolute, resolve } from "node:path";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { endToEndChecks } from "./e2e/index.js";
import { ledgerChecks, MODEL_CHECK_PREFIX, randomSeed } from "./ledger/index.js";
import { RESULT_PROPERTY_NAME } from "./ledger/result-property.js";
import { renderFailures, renderReportJson, renderReportTable, runChecks } from "./report.js";
import type { Check, CheckResult, LedgerSubject } from "./types.js";

interface LevelOptions {
  runs: number;
  seed: number;
  path?: string;
  vectors?: unknown;
}

/**
 * The kit's levels. Each turns a subject into named checks; the report and the exit status
 * are the same for all. A property check of a level is replayed with --level L --seed S --path P.
 */
const LEVELS: Record<string, { build: (subject: LedgerSubject, o: LevelOptions) => Check[]; replayOnly: (c: Check) => boolean }> = {
  ledger: {
    build: (subject, o) => ledgerChecks(subject, o),
    replayOnly: (c) => c.name.startsWith(MODEL_CHECK_PREFIX) || c.name.startsWith(RESULT_PROPERTY_NAME),
  },
  e2e: {
    build: (subject, o) => endToEndChecks(subject, { runs: o.runs, seed: o.seed, ...(o.path === undefined ? {} : { path: o.path }) }),
    replayOnly: () => true,
  },
};

const USAGE = `usage: dispatch-once-conformance --adapter <module> [options]
       (from the monorepo root: pnpm conformance --adapter <module> [options])

  --adapter <path>   module whose default export is a LedgerSubject, or a function
                     returning one (or a promise of one)
  --level <level>    ledger (the ledger contract, CONF-1), e2e (random conversations
                     through the turn runner, CONF-2) or all (default)
  --runs <n>         runs of each property check (default $CONFORMANCE_RUNS or 100)
  --seed <n>         seed of the property check (default $CONFORMANCE_SEED or random; always printed)
  --path <p>         replay exactly the shrunk counterexample at this fast-check path
                     (with --seed and --level; runs only that level's property check)
  --only <text>      run only checks whose "RULE name" contains <text> (case-insensitive)
  --vectors <file>   ledger-transitions.json to use instead of the bundled copy
  --json             print the report as JSON on stdout (progress still goes to stderr)
  --quiet            no per-check progress on stderr
  -h, --help         this text

Exit status: 0 when every MUST rule that applies passes, 1 when one fails, 2 on bad usage.`;

class UsageError extends Error {}

interface CliOptions {
  adapter: string;
  levels: string[];
  runs: number;
  seed: number;
  path?: string;
  only?: string;
  vectors?: unknown;
  json: boolean;
  quiet: boolean;
}

function parse(argv: string[]): CliOptions | "help" {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        adapter: { type: "string" },
        level: { type: "string", default: "all" },
        runs: { type: "string" },
        seed: { type: "string" },
        path: { type: "string" },
        only: { type: "string" },
        vectors: { type: "string" },
        json: { type: "boolean", default: false },
        quiet: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  if (values.help) return "help";
  if (values.adapter === undefined) throw new UsageError("--adapter <path to module> is required");
  const int = (name: string, text: string | undefined, fallback: number, min: number): number => {
    if (text === undefined) return fallback;
    if (!/^-?\d+$/.test(text) || !Number.isSafeInteger(Number(text)) || Number(text) < min) {
      throw new UsageError(`--${name} must be an integer >= ${min}, got ${JSON.stringify(text)}`);
    }
    return Number(text);
  };
  if (values.path !== undefined && values.seed === undefined) throw new UsageError("--path needs the --seed it was printed with");
  const level = values.level ?? "all";
  if (level !== "all" && !(level in LEVELS)) throw new UsageError(`--level must be one of ${[...Object.keys(LEVELS), "all"].join(", ")}, got ${JSON.stringify(level)}`);
  if (values.path !== undefined && level === "all") throw new UsageError("--path replays one level's property: give --level ledger or --level e2e");
  if (values.path !== undefined && !/^\d+(:\d+)*$/.test(values.path)) throw new UsageError(`--path must look like 3:1:0, got ${JSON.stringify(values.path)}`);
  const options: CliOptions = {
    adapter: values.adapter,
    levels: level === "all" ? Object.keys(LEVELS) : [level],
    runs: int("runs", values.runs ?? process.env.CONFORMANCE_RUNS, 100, 1),
    seed: int("seed", values.seed ?? process.env.CONFORMANCE_SEED, randomSeed(), -(2 ** 31)),
    json: values.json ?? false,
    quiet: values.quiet ?? false,
  };
  if (values.path !== undefined) options.path = values.path;
  if (values.only !== undefined) options.only = values.only;
  if (values.vectors !== undefined) {
    try {
      options.vectors = JSON.parse(readFileSync(values.vectors, "utf8"));
    } catch (error) {
      throw new UsageError(`--vectors ${values.vectors}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  return options;
}

async function loadSubject(modulePath: string): Promise<LedgerSubject> {
  const absolute = isAbsolute(modulePath) ? modulePath : resolve(process.cwd(), modulePath);
  let mod: { default?: unknown };
  try {
    mod = (await import(pathToFileURL(absolute).href)) as { default?: unknown };
  } catch (error) {
    const hint = /\.[cm]?ts$/.test(absolute) ? " (a TypeScript module needs a loader: node --import tsx ...)" : "";
    throw new UsageError(`cannot load --adapter ${modulePath}${hint}: ${error instanceof Error ? error.message : String(error)}`);
  }
  let subject: unknown = mod.default;
  if (typeof subject === "function") subject = await (subject as () => unknown)();
  if (typeof subject !== "object" || subject === null || typeof (subject as LedgerSubject).create !== "function") {
    throw new UsageError(
      `--adapter ${modulePath}: the default export must be a LedgerSubject ({ name, capabilities, create }) or a function returning one`,
    );
  }
  return subject as LedgerSubject;
}

function shellQuote(text: string): string {
  return /^[\w./:@=-]+$/.test(text) ? text : `'${text.replaceAll("'", "'\\''")}'`;
}

export async function main(argv: string[]): Promise<number> {
  let options: CliOptions | "help";
  let subject: LedgerSubject;
  let checks: Array<Check & { level: string }>;
  try {
    options = parse(argv);
    if (options === "help") {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    }
    subject = await loadSubject(options.adapter);
    const o = options;
    const levelOptions: LevelOptions = {
      runs: o.runs,
      seed: o.seed,
      ...(o.path === undefined ? {} : { path: o.path }),
      ...(o.vectors === undefined ? {} : { vectors: o.vectors }),
    };
    checks = o.levels.flatMap((level) =>
      LEVELS[level]!.build(subject, levelOptions)
        // A replay runs only the property the path belongs to.
        .filter((c) => o.path === undefined || LEVELS[level]!.replayOnly(c))
        .map((c) => Object.assign(c, { level })),
    );
  } catch (error) {
    if (error instanceof UsageError || error instanceof TypeError) {
      process.stderr.write(`dispatch-once-conformance: ${error.message}\n\n${USAGE}\n`);
      return 2;
    }
    throw error;
  }
  const only = options.only?.toLowerCase();
  const selected = only === undefined ? checks : checks.filter((c) => `${c.rule} ${c.name}`.toLowerCase().includes(only));
  if (selected.length === 0) {
    process.stderr.write(`dispatch-once-conformance: --only ${JSON.stringify(options.only)} matches no check\n`);
    return 2;
  }
  const opts = options;
  const report = await runChecks(selected, {
    subject: subject.name,
    levels: opts.levels,
    seed: opts.seed,
    ...(opts.path === undefined ? { runs: opts.runs } : {}),
    onResult: (r) => {
      if (opts.quiet) return;
      const mark = r.status === "pass" ? "✓" : r.status === "fail" ? "✗" : "-";
      process.stderr.write(`${mark} ${r.rule} ${r.name}${r.status === "not_applicable" ? ` (not applicable: ${r.reasonNotApplicable})` : ""}\n`);
    },
  });
  const levelOf = new Map(selected.map((c) => [`${c.rule} ${c.name}`, c.level]));
  const replay = (c: CheckResult) => {
    const cx = c.counterexample;
    if (cx === undefined) return undefined;
    const level = levelOf.get(`${c.rule} ${c.name}`) ?? "ledger";
    // A path belongs to one property: name it (the part of the check name before its run count).
    const only = c.name.startsWith(MODEL_CHECK_PREFIX) ? MODEL_CHECK_PREFIX : c.name.startsWith(RESULT_PROPERTY_NAME) ? "random JSON texts" : c.name.replace(/ \(.*$/, "");
    return `pnpm conformance --adapter ${shellQuote(opts.adapter)} --level ${level} --seed ${cx.seed} --path ${shellQuote(cx.path)} --only ${shellQuote(only)}`;
  };
  if (opts.json) {
    process.stdout.write(`${renderReportJson(report)}\n`);
  } else {
    process.stdout.write(`\n${renderReportTable(report)}\n`);
    const failures = renderFailures(report, { replay });
    if (failures !== "") process.stdout.write(`\nFailures:\n\n${failures}\n`);
    process.stdout.write(`\nseed ${opts.seed}${opts.path === undefined ? "" : `, path ${opts.path}`} (re-run the same cases with --seed ${opts.seed})\n`);
  }
  return report.conforms ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`dispatch-once-conformance: internal error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exitCode = 2;
  },
);
