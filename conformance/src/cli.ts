#!/usr/bin/env node
import { dirname, isAbsolute, resolve } from "node:path";
import { readFileSync, writeSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import {
  DEFAULT_CHECK_TIMEOUT_MS,
  DEFAULT_END_TO_END_RUNS,
  DEFAULT_RUN_TIMEOUT_MS,
  DEFAULT_RUNS,
  MAX_CONSECUTIVE_TIMEOUTS,
  envInteger,
  randomSeed,
} from "./ledger/defaults.js";
import { LevelNotInstalledError } from "./errors/level-not-installed.js";
import { END_TO_END_PACKAGE, loadEndToEndLevel } from "./levels.js";
import { ledgerChecks, MODEL_CHECK_PREFIX } from "./ledger/index.js";
import { RESULT_PROPERTY_NAME } from "./ledger/result-property.js";
import { RETIRE_PROPERTY_NAME } from "./ledger/retire-property.js";
import { INCONCLUSIVE_ATTEMPTS, renderFailures, renderReportJson, renderReportTable, runChecks } from "./report.js";
import { conversationLevel } from "./conversation/level.js";
import { validateConversationStoreSubject } from "./conversation/index.js";
import type { ConversationStoreFixture, ConversationStoreSubject } from "./conversation/types.js";
import { memoryLedgerSubject } from "./subjects/memory.js";
import type { Check, CheckResult, ConformanceLevel, LedgerSubject, LevelOptions } from "./types.js";

/** The property checks of the ledger level: a --path belongs to exactly one of them. */
const LEDGER_PROPERTIES = [MODEL_CHECK_PREFIX, RESULT_PROPERTY_NAME, RETIRE_PROPERTY_NAME];

/** The ledger level (CONF-1), built in. */
const ledgerLevel: ConformanceLevel = {
  checks: (subject, o) => ledgerChecks(subject, o),
  replayable: (c) => LEDGER_PROPERTIES.some((p) => c.name.startsWith(p)),
  property: (c) => (c.name.startsWith(MODEL_CHECK_PREFIX) ? MODEL_CHECK_PREFIX : c.name.startsWith(RESULT_PROPERTY_NAME) ? "random JSON texts" : c.name.startsWith(RETIRE_PROPERTY_NAME) ? "retire property" : c.name.replace(/ \(.*$/, "")),
};

/**
 * The kit's levels. Each turns a subject into named checks; the report and the exit status are the
 * same for all. The end-to-end level is a separate package (its mocks pull express and
 * better-sqlite3), loaded when it is asked for: `--level e2e` and `--level all` fail with exit 2 and
 * what to install when it is missing; with no --level, the run covers every level installed and
 * says on stderr and in the report's `levels` which ran.
 */
const LEVEL_NAMES = ["ledger", "conversation", "e2e"] as const;
type LevelName = (typeof LEVEL_NAMES)[number];

/**
 * What the module certifies, by the flag that names it: a ledger adapter (`--adapter`, a
 * LedgerSubject) or a conversation store (`--store`, a ConversationStoreSubject). Each kind has its
 * own levels; the end-to-end level takes either (a store runs under the runner over the kit's
 * in-memory ledger).
 */
type SubjectKind = "ledger" | "store";
const LEVELS_OF: Record<SubjectKind, readonly LevelName[]> = { ledger: ["ledger", "e2e"], store: ["conversation", "e2e"] };
const FLAG: Record<SubjectKind, string> = { ledger: "--adapter", store: "--store" };
type Subject = LedgerSubject | ConversationStoreSubject;

async function loadLevel(level: LevelName, module: string): Promise<ConformanceLevel<Subject>> {
  if (level === "ledger") return ledgerLevel as ConformanceLevel<Subject>;
  if (level === "conversation") return conversationLevel as ConformanceLevel<Subject>;
  // From the kit's own place, then the user's project (the working directory, the module's directory).
  return loadEndToEndLevel({ from: [process.cwd(), dirname(resolve(process.cwd(), module))] }) as Promise<ConformanceLevel<Subject>>;
}

const USAGE = `usage: dispatch-once-conformance --adapter <module> [options]    (a ledger adapter)
       dispatch-once-conformance --store <module> [options]      (a conversation store)
       (from the monorepo root: pnpm conformance --adapter|--store <module> [options])

  --adapter <path>        module whose default export is a LedgerSubject, or a function
                          returning one (or a promise of one)
  --store <path>          module whose default export is a ConversationStoreSubject, or a
                          function returning one (or a promise of one); not with --adapter
  --level <level>         with --adapter: ledger (the ledger contract, CONF-1); with --store:
                          conversation (the conversation-store contract, spec section 4);
                          with either: e2e (random conversations through the turn runner,
                          CONF-2; needs ${END_TO_END_PACKAGE}; a store runs over the kit's
                          in-memory ledger and needs the subject's conversationStore({ now }))
                          or all (both of the module's). Default: every level installed
  --runs <n>              runs of every property check of every level (default: each
                          level's own, below)
  --e2e-runs <n>          runs of the end-to-end property (default --runs, else
                          $CONFORMANCE_E2E_RUNS, else ${DEFAULT_END_TO_END_RUNS})
  --provider <name>       the stream side of the end-to-end level: anthropic (the Messages
                          API runner against the Anthropic mock), openai (the Responses
                          API runner against the OpenAI mock), openai-chat (the Chat
                          Completions runner against the OpenAI mock) or ai-sdk (an app
                          on the Vercel AI SDK's streamText with createOnceTools, against
                          the OpenAI mock). Default anthropic
  --seed <n>              seed of every random choice, keys included (default
                          $CONFORMANCE_SEED, else random; always printed)
  --path <p>              replay exactly the one case at this fast-check path (with --seed,
                          --level and, at the ledger and conversation levels, --only naming
                          the property)
  --only <what>           run only some checks: a rule id runs that rule's checks and no
                          other's (--only LEDGER-1 is not LEDGER-10); a * matches any
                          characters of a rule id (--only 'LEDGER-*', --only 'TURN-2*', quoted
                          for the shell); any other text runs the checks whose name contains
                          it (--only model-based). Case does not matter. One that selects no
                          check exits 2
  --vectors <file>        ledger-transitions.json to use instead of the bundled copy
  --check-timeout <ms>    time limit of one check, of every 100 runs of a property check
                          and of every 20 end-to-end runs (default
                          $CONFORMANCE_CHECK_TIMEOUT_MS, else ${DEFAULT_CHECK_TIMEOUT_MS})
  --timeout <ms>          time limit of the whole run (default $CONFORMANCE_TIMEOUT_MS,
                          else ${DEFAULT_RUN_TIMEOUT_MS})
  --json                  print the report as JSON on stdout (progress still goes to stderr)
  --quiet                 no per-check progress on stderr
  -h, --help              this text

Ledger- and conversation-level property runs: $CONFORMANCE_RUNS, else ${DEFAULT_RUNS} (the same
defaults as the API).
A check over its time limit fails, naming the rule and the adapter calls still pending; a
property interrupted by its limit fails; after ${MAX_CONSECUTIVE_TIMEOUTS} checks in a row time out, or when the
run's limit is reached, the remaining checks fail as not run. A check that could not
conclude (the store too slow for its window, the kit's own process stalled) runs again on
a fresh fixture, ${INCONCLUSIVE_ATTEMPTS} times in all; still not, it is reported inconclusive (no violation
found; not certified).

Exit status: 0 when every MUST rule that applies passes, 1 when one fails (a timeout
included) or is inconclusive (not certified), 2 on bad usage (a module that cannot be loaded or is not a subject of its flag,
a level the subject cannot run, ${END_TO_END_PACKAGE} missing for --level e2e or all
included) or an internal error.`;

/** A rule id as the spec writes them (LEDGER-7, TURN-21, CONF-2). */
const RULE_ID = /^[A-Z]+-\d+$/i;
/** A pattern of rule ids: a `*` stands for any characters (LEDGER-*, LEDGER-1*, *-12). */
const RULE_PATTERN = /^[A-Z0-9*-]*\*[A-Z0-9*-]*$/i;

/**
 * What `--only` selects. A rule id selects that rule's checks and no other: `--only LEDGER-1` is
 * not LEDGER-10..30 (a CI job pinned to one rule must not grow as rules are added). A `*` makes a
 * glob over rule ids. Any other text selects the checks whose name contains it, as the printed
 * replay commands name a property (`--only model-based:`). Case never matters.
 */
function onlySelector(text: string): { selects: (c: Check) => boolean; shown: string; what: string } {
  const shown = /^[\w*:.-]+$/.test(text) ? text : JSON.stringify(text);
  if (RULE_ID.test(text)) {
    const id = text.toUpperCase();
    return { selects: (c) => c.rule.toUpperCase() === id, shown, what: `rule ${id}` };
  }
  if (RULE_PATTERN.test(text)) {
    // Letters, digits and dashes only around the stars: nothing in it is special to a RegExp.
    const glob = new RegExp(`^${text.split("*").join(".*")}$`, "i");
    return { selects: (c) => glob.test(c.rule), shown, what: `a rule that ${text} matches` };
  }
  const part = text.toLowerCase();
  return { selects: (c) => c.name.toLowerCase().includes(part), shown, what: "a name that contains it" };
}

/**
 * Bad usage (exit 2). `usage: false` for arguments that parse but do not fit (the module, a level
 * the subject cannot run, two subjects): one line says what is wrong, without the usage text.
 */
class UsageError extends Error {
  constructor(
    message: string,
    readonly usage = true,
  ) {
    super(message);
  }
}
/** A well-formed command line that cannot run: one line on stderr, exit 2. */
const inputError = (message: string) => new UsageError(message, false);
/** The adapter itself misbehaved before any check could run (exit 1, like a failing check). */
class AdapterError extends Error {}

/**
 * `promise` within `ms`, failing closed: a promise that nothing can settle any more (Node's event
 * loop is empty) is caught through 'beforeExit' instead of ending the process with status 0.
 */
function withinLimit<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const settle = (fn: () => void) => {
      clearTimeout(timer);
      process.off("beforeExit", onIdle);
      fn();
    };
    const timer = setTimeout(() => settle(() => reject(new AdapterError(`${what} did not finish within ${ms} ms`))), ms);
    timer.unref();
    const onIdle = () => setImmediate(() => settle(() => reject(new AdapterError(`${what} never finishes: it waits on a promise that nothing left in the event loop can settle`))));
    process.on("beforeExit", onIdle);
    promise.then(
      (value) => settle(() => resolve(value)),
      (error: unknown) => settle(() => reject(error)),
    );
  });
}

interface CliOptions {
  /** What the module certifies: its flag, --adapter or --store. */
  kind: SubjectKind;
  /** The subject module's path, as given. */
  module: string;
  levels: LevelName[];
  /** No --level: the e2e level runs when its package is installed, and is left out (with a note) when not. */
  levelsByDefault: boolean;
  /** Runs per level, as resolved (explicit flags, then the environment, then the defaults). */
  runs: Record<string, number>;
  seed: number;
  /** The end-to-end level's stream side; the level itself says which it knows. */
  provider: string;
  path?: string;
  only?: string;
  vectors?: unknown;
  checkTimeoutMs: number;
  runTimeoutMs: number;
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
        store: { type: "string" },
        level: { type: "string" },
        runs: { type: "string" },
        "e2e-runs": { type: "string" },
        provider: { type: "string" },
        seed: { type: "string" },
        path: { type: "string" },
        only: { type: "string" },
        vectors: { type: "string" },
        "check-timeout": { type: "string" },
        timeout: { type: "string" },
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
  if (values.adapter !== undefined && values.store !== undefined) {
    throw inputError("give --adapter (a ledger) or --store (a conversation store), not both: each run certifies one subject");
  }
  if (values.adapter === undefined && values.store === undefined) {
    throw new UsageError("--adapter <path to module> is required (a ledger adapter), or --store <path to module> (a conversation store)");
  }
  const kind: SubjectKind = values.store !== undefined ? "store" : "ledger";
  const module = (values.store ?? values.adapter)!;
  const own = LEVELS_OF[kind];
  const int = (name: string, text: string | undefined, min: number): number | undefined => {
    if (text === undefined) return undefined;
    if (!/^-?\d+$/.test(text) || !Number.isSafeInteger(Number(text)) || Number(text) < min) {
      throw new UsageError(`--${name} must be an integer >= ${min}, got ${JSON.stringify(text)}`);
    }
    return Number(text);
  };
  const env = (name: Parameters<typeof envInteger>[0], min: number): number | undefined => {
    try {
      return envInteger(name, min);
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
  };
  if (values.path !== undefined && values.seed === undefined) throw new UsageError("--path needs the --seed it was printed with");
  const level = values.level ?? "all";
  if (level !== "all" && !(LEVEL_NAMES as readonly string[]).includes(level)) throw new UsageError(`--level must be one of ${[...own, "all"].join(", ")}, got ${JSON.stringify(level)}`);
  if (level === "ledger" && kind === "store") {
    throw inputError(`the ledger level certifies a ledger adapter (--adapter): --store ${module} runs --level conversation, e2e or all`);
  }
  if (level === "conversation" && kind === "ledger") {
    throw inputError(`the conversation level certifies a conversation store (--store): --adapter ${module} runs --level ledger, e2e or all`);
  }
  if (values.path !== undefined && level === "all") throw new UsageError(`--path replays one level's property: give ${own.map((l) => `--level ${l}`).join(" or ")}`);
  if (values.path !== undefined && !/^\d+(:\d+)*$/.test(values.path)) throw new UsageError(`--path must look like 3:1:0, got ${JSON.stringify(values.path)}`);
  if (values.provider !== undefined && (level === "ledger" || level === "conversation")) throw new UsageError("--provider chooses the end-to-end level's stream side: give --level e2e or all");
  if (kind === "store" && values.vectors !== undefined) throw inputError("--vectors are ledger-transition vectors, for --adapter: a conversation store (--store) has none");
  // The AI SDK app keeps no conversation store of the kit's: it cannot run the store under test.
  if (kind === "store" && values.provider === "ai-sdk") {
    throw inputError(`--provider ai-sdk runs an AI SDK app, which keeps no conversation store: --store ${module} runs the e2e level with --provider anthropic, openai or openai-chat`);
  }
  const runs = int("runs", values.runs, 1);
  // The same sources in the same order as ledgerChecks and endToEndChecks resolve them.
  const propertyRuns = runs ?? env("CONFORMANCE_RUNS", 1) ?? DEFAULT_RUNS;
  const options: CliOptions = {
    kind,
    module,
    levels: level === "all" ? [...own] : [level as LevelName],
    levelsByDefault: values.level === undefined,
    runs: {
      ledger: propertyRuns,
      conversation: propertyRuns,
      e2e: int("e2e-runs", values["e2e-runs"], 1) ?? runs ?? env("CONFORMANCE_E2E_RUNS", 1) ?? DEFAULT_END_TO_END_RUNS,
    },
    seed: int("seed", values.seed, -(2 ** 31)) ?? env("CONFORMANCE_SEED", -(2 ** 31)) ?? randomSeed(),
    provider: values.provider ?? "anthropic",
    checkTimeoutMs: int("check-timeout", values["check-timeout"], 1) ?? env("CONFORMANCE_CHECK_TIMEOUT_MS", 1) ?? DEFAULT_CHECK_TIMEOUT_MS,
    runTimeoutMs: int("timeout", values.timeout, 1) ?? env("CONFORMANCE_TIMEOUT_MS", 1) ?? DEFAULT_RUN_TIMEOUT_MS,
    json: values.json ?? false,
    quiet: values.quiet ?? false,
  };
  if (values.path !== undefined) options.path = values.path;
  if (values.only !== undefined) {
    if (values.only.trim() === "") throw new UsageError("--only needs a rule id (LEDGER-7), a pattern of rule ids ('LEDGER-*') or a part of a check's name");
    options.only = values.only;
  }
  if (values.vectors !== undefined) {
    try {
      options.vectors = JSON.parse(readFileSync(values.vectors, "utf8"));
    } catch (error) {
      throw new UsageError(`--vectors ${values.vectors}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  return options;
}

/** The module's default export, called when it is a function (a subject or a promise of one). */
async function loadDefaultExport(flag: string, modulePath: string, timeoutMs: number): Promise<unknown> {
  const absolute = isAbsolute(modulePath) ? modulePath : resolve(process.cwd(), modulePath);
  let mod: { default?: unknown };
  try {
    mod = (await withinLimit(import(pathToFileURL(absolute).href), timeoutMs, `loading ${flag} ${modulePath}`)) as { default?: unknown };
  } catch (error) {
    if (error instanceof AdapterError) throw error;
    const hint = /\.[cm]?ts$/.test(absolute) ? " (a TypeScript module needs a loader: node --import tsx ...)" : "";
    throw inputError(`cannot load ${flag} ${modulePath}${hint}: ${firstLine(error)}`);
  }
  if (mod.default === undefined) {
    const what = flag === "--store" ? "a ConversationStoreSubject ({ name, capabilities, create })" : "a LedgerSubject ({ name, capabilities, create })";
    throw inputError(`${flag} ${modulePath} has no default export: export default ${what}, or a function returning one`);
  }
  let subject: unknown = mod.default;
  if (typeof subject === "function") {
    try {
      subject = await withinLimit(Promise.resolve().then(() => (subject as () => unknown)()), timeoutMs, `the default export of ${flag} ${modulePath}`);
    } catch (error) {
      if (error instanceof AdapterError) throw error;
      throw new AdapterError(`the default export of ${flag} ${modulePath} threw: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  return subject;
}

function firstLine(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).split("\n")[0]!;
}

async function loadLedgerSubject(modulePath: string, timeoutMs: number): Promise<LedgerSubject> {
  const subject = await loadDefaultExport("--adapter", modulePath, timeoutMs);
  if (typeof subject !== "object" || subject === null || typeof (subject as LedgerSubject).create !== "function") {
    throw inputError(`--adapter ${modulePath}: the default export must be a LedgerSubject ({ name, capabilities, create }) or a function returning one`);
  }
  return subject as LedgerSubject;
}

/** The raw hooks every store fixture has, and those a declared capability needs. */
const FIXTURE_HOOKS = ["lease", "messages", "turns", "records", "expireLease"] as const;
const CAPABILITY_HOOKS = { corruption: "corrupt", unavailability: "disconnected", legacyFailedRows: "forgetFailedAt", clockSkew: "skewedInstance" } as const;

/**
 * The --store module's subject, its shape checked, and, when the conversation level runs, one
 * fixture made and destroyed to check that too: a LedgerSubject has the same top-level shape, and
 * a fixture without a hook would otherwise fail every check with "undefined is not a function".
 */
async function loadStoreSubject(modulePath: string, timeoutMs: number, probe: boolean): Promise<ConversationStoreSubject> {
  const subject = (await loadDefaultExport("--store", modulePath, timeoutMs)) as ConversationStoreSubject;
  try {
    validateConversationStoreSubject(subject);
  } catch (error) {
    const reason = firstLine(error).replace(/^conversation-store subject( [^:]*)?: /, "");
    throw inputError(`--store ${modulePath}: the default export is not a ConversationStoreSubject: ${reason}`);
  }
  if (!probe) return subject;
  let fixture: ConversationStoreFixture;
  try {
    fixture = await withinLimit(Promise.resolve().then(() => subject.create()), timeoutMs, `create() of --store ${modulePath}`);
  } catch (error) {
    if (error instanceof AdapterError) throw error;
    throw new AdapterError(`create() of --store ${modulePath} threw: ${firstLine(error)}`);
  }
  const f = fixture as unknown as Record<string, unknown> | undefined;
  const raw = f?.raw as Record<string, unknown> | undefined;
  const hooks = [...FIXTURE_HOOKS, ...Object.entries(CAPABILITY_HOOKS).filter(([c]) => subject.capabilities[c as keyof typeof CAPABILITY_HOOKS] === true).map(([, h]) => h)];
  const missing =
    typeof f?.store !== "object" || f.store === null
      ? `\`store\` (the ConversationStore under test)${f !== undefined && "ledger" in f ? ": it has `ledger`, as a LedgerSubject's fixture does; give a ledger with --adapter" : ""}`
      : typeof f.reopen !== "function"
        ? "`reopen` (a function)"
        : typeof f.destroy !== "function"
          ? "`destroy` (a function)"
          : typeof raw !== "object" || raw === null
            ? "`raw` (the storage hooks)"
            : hooks.filter((h) => typeof raw[h] !== "function").map((h) => `raw.${h}`)[0];
  if (typeof f?.destroy === "function") {
    await withinLimit(Promise.resolve().then(() => (f.destroy as () => unknown)()), timeoutMs, `destroy() of --store ${modulePath}`).catch((error: unknown) => {
      if (missing === undefined) throw new AdapterError(`destroy() of --store ${modulePath} threw: ${firstLine(error)}`);
    });
  }
  if (missing !== undefined) {
    const by = Object.entries(CAPABILITY_HOOKS).find(([, h]) => `raw.${h}` === missing)?.[0];
    throw inputError(`--store ${modulePath}: create() returned a fixture without ${missing}${by === undefined ? "" : ` (capabilities.${by} is declared)`}`);
  }
  return subject;
}

function shellQuote(text: string): string {
  return /^[\w./:@=-]+$/.test(text) ? text : `'${text.replaceAll("'", "'\\''")}'`;
}

function progress(r: CheckResult): string {
  const mark = r.status === "pass" ? "✓" : r.status === "fail" ? "✗" : r.status === "inconclusive" ? "?" : "-";
  const tail =
    r.status === "not_applicable"
      ? ` (not applicable: ${r.reasonNotApplicable})`
      : r.status === "inconclusive"
        ? ` (inconclusive after ${r.attempts ?? 1} attempts: no violation found; not certified)`
        : r.attempts !== undefined
          ? ` (passed on attempt ${r.attempts}: the earlier could not conclude)`
          : r.timedOut !== undefined
        ? `\n    ${(r.error ?? "").split("\n").join("\n    ")}`
        : "";
  return `${mark} ${r.rule} ${r.name}${tail}\n`;
}

export async function main(argv: string[]): Promise<number> {
  let options: CliOptions | "help";
  let subject: Subject;
  let checks: Array<Check & { level: string }>;
  const levels = new Map<LevelName, ConformanceLevel<Subject>>();
  try {
    options = parse(argv);
    if (options === "help") {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    }
    // The levels first: a missing package is a usage error, reported before the adapter is touched.
    for (const level of options.levels) {
      try {
        const loaded = await loadLevel(level, options.module);
        // An end-to-end level from before it took a store would run the reference store instead.
        if (options.kind === "store" && level === "e2e" && loaded.takesConversationStore !== true) {
          throw inputError(`the installed ${END_TO_END_PACKAGE} runs the reference conversation store only: install a version that matches @dispatch-once/conformance to run --store ${options.module} at the e2e level`);
        }
        levels.set(level, loaded);
      } catch (error) {
        if (!(LevelNotInstalledError.isInstance(error) && options.levelsByDefault)) throw error;
        // No --level asked for it: run what is installed, and say so (the report's `levels` too).
        process.stderr.write(`dispatch-once-conformance: the ${level} level is not installed (${error.packageName}): running ${options.levels.filter((l) => l !== level).join(", ")} only\n`);
      }
    }
    options.levels = options.levels.filter((l) => levels.has(l));
    if (options.kind === "ledger") {
      subject = await loadLedgerSubject(options.module, options.checkTimeoutMs);
    } else {
      const store = await loadStoreSubject(options.module, options.checkTimeoutMs, options.levels.includes("conversation"));
      if (options.levels.includes("e2e") && store.conversationStore === undefined) {
        const why = `--store ${options.module}: the e2e level runs the store under the turn runner and needs the subject's conversationStore({ now }) (a synchronous factory of a fresh store on the case's clock), which it does not have`;
        if (!options.levelsByDefault) throw inputError(why);
        process.stderr.write(`dispatch-once-conformance: ${why}: running conversation only\n`);
        options.levels = options.levels.filter((l) => l !== "e2e");
      }
      subject = store;
    }
    const o = options;
    const store = o.kind === "store" ? (subject as ConversationStoreSubject) : undefined;
    checks = o.levels.flatMap((level) => {
      const levelOptions: LevelOptions = {
        runs: o.runs[level]!,
        seed: o.seed,
        ...(level === "e2e" ? { provider: o.provider } : {}),
        checkTimeoutMs: o.checkTimeoutMs,
        ...(o.path === undefined ? {} : { path: o.path }),
        ...(o.vectors === undefined ? {} : { vectors: o.vectors }),
        ...(level === "e2e" && store?.conversationStore !== undefined ? { conversationStore: store.conversationStore.bind(store) } : {}),
      };
      // A store runs the end-to-end level over the kit's reference ledger: the store is what is certified.
      const levelSubject: Subject = level === "e2e" && store !== undefined ? memoryLedgerSubject("ledger-memory (the kit's)") : subject;
      return (
        levels
          .get(level)!
          .checks(levelSubject, levelOptions)
          // A replay runs only the property the path belongs to.
          .filter((c) => o.path === undefined || levels.get(level)!.replayable(c))
          .map((c) => Object.assign(c, { level }))
      );
    });
  } catch (error) {
    if (LevelNotInstalledError.isInstance(error)) {
      // The error names the ledger level as the one to run instead; a store's is the conversation level.
      const message = (options! as CliOptions | "help" | undefined) instanceof Object && (options! as CliOptions).kind === "store" ? error.message.replace("--level ledger", "--level conversation") : error.message;
      process.stderr.write(`dispatch-once-conformance: ${message}\n`);
      return 2;
    }
    if (error instanceof UsageError && !error.usage) {
      process.stderr.write(`dispatch-once-conformance: ${error.message}\n`);
      return 2;
    }
    if (error instanceof UsageError || error instanceof TypeError) {
      process.stderr.write(`dispatch-once-conformance: ${error.message}\n\n${USAGE}\n`);
      return 2;
    }
    if (error instanceof AdapterError) {
      process.stderr.write(`dispatch-once-conformance: DOES NOT CONFORM: ${error.message}\n`);
      return 1;
    }
    throw error;
  }
  const only = options.only === undefined ? undefined : onlySelector(options.only);
  const selected = only === undefined ? checks : checks.filter(only.selects);
  if (only !== undefined && selected.length === 0) {
    process.stderr.write(`dispatch-once-conformance: --only ${only.shown}: no check of the ${options.levels.join(", ")} level${options.levels.length === 1 ? "" : "s"} has ${only.what}\n`);
    return 2;
  }
  if (options.path !== undefined && selected.length !== 1) {
    // A path is a position in ONE property's shrink tree: replaying it in two properties replays two unrelated cases.
    process.stderr.write(
      `dispatch-once-conformance: --path replays one case of one property, but ${selected.length} checks are selected: add --only with one of\n${selected.map((c) => `  ${JSON.stringify(c.name.replace(/ \(.*$/, ""))}`).join("\n")}\n`,
    );
    return 2;
  }
  const opts = options;
  const runsByLevel = Object.fromEntries(opts.levels.map((l) => [l, opts.runs[l]!]));
  const report = await runChecks(selected, {
    subject: subject.name,
    levels: opts.levels,
    seed: opts.seed,
    ...(opts.path === undefined ? { runs: opts.runs[opts.levels[0]!]!, runsByLevel } : {}),
    ...(opts.levels.includes("e2e") ? { provider: opts.provider } : {}),
    checkTimeoutMs: opts.checkTimeoutMs,
    runTimeoutMs: opts.runTimeoutMs,
    onResult: (r) => {
      if (!opts.quiet) process.stderr.write(progress(r));
    },
  });
  const levelOf = new Map(selected.map((c) => [`${c.rule} ${c.name}`, c.level]));
  const replay = (c: CheckResult) => {
    const cx = c.counterexample;
    // No path, no replay: a property that was interrupted, or that failed before fast-check named a case.
    if (cx === undefined || cx.path === "") return undefined;
    const level = (levelOf.get(`${c.rule} ${c.name}`) ?? opts.levels[0]!) as LevelName;
    // A path belongs to one property: its level names it (the part of the check name before its run count).
    const property = (levels.get(level) ?? (ledgerLevel as ConformanceLevel<Subject>)).property(c);
    return `pnpm conformance ${FLAG[opts.kind]} ${shellQuote(opts.module)} --level ${level}${level === "e2e" ? ` --provider ${shellQuote(opts.provider)}` : ""} --seed ${cx.seed} --path ${shellQuote(cx.path)} --only ${shellQuote(property)}`;
  };
  if (opts.json) {
    process.stdout.write(`${renderReportJson(report)}\n`);
  } else {
    process.stdout.write(`\n${renderReportTable(report)}\n`);
    const failures = renderFailures(report, { replay });
    if (failures !== "") process.stdout.write(`\n${report.checks.some((c) => c.status === "fail") ? "Failures" : "Not certified"}:\n\n${failures}\n`);
    process.stdout.write(`\nseed ${opts.seed}${opts.path === undefined ? "" : `, path ${opts.path}`} (re-run the same cases with --seed ${opts.seed})\n`);
  }
  return report.conforms ? 0 : 1;
}

/**
 * Exits once stdout and stderr are written. A hung adapter leaves sockets and timers behind that
 * would keep the process alive after the report, so the CLI never waits for the event loop to
 * drain; and it never leaves the exit status to chance (Node exits 0 when only promises remain).
 */
function exit(code: number): void {
  process.exitCode = code;
  let waiting = 2;
  const done = () => {
    if (--waiting === 0) process.exit(code);
  };
  process.stdout.write("", done);
  process.stderr.write("", done);
}

// The last guard: the process must never end without a verdict and with status 0 (Node ends a process
// whose only work left is promises nobody can settle, silently, with status 0).
let settled = false;
process.on("exit", (code) => {
  if (settled) return;
  process.exitCode = 2;
  writeSync(2, `dispatch-once-conformance: the run ended before it could report (status ${code} replaced by 2): something it waited on can never settle\n`);
});

main(process.argv.slice(2)).then((code) => {
  settled = true;
  exit(code);
}, (error: unknown) => {
  settled = true;
  process.stderr.write(`dispatch-once-conformance: internal error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  exit(2);
});
