/** Command-line options of `pnpm demo`, parsed strictly: every bad option is a typed error (exit code 2). */

import { DEMO_PROVIDERS, type DemoProvider } from "./providers.js";

export type LedgerSpec =
  | { kind: "sqlite"; path?: string }
  | { kind: "postgres"; url: string }
  | { kind: "redis"; url: string };

export interface DemoOptions {
  /** Payment turns in the chaos run, per side (naive and guarded). */
  turns: number;
  /** Share of turns whose stream fails once (the chapter: 0.006). */
  failureRate: number;
  /** Share of payment turns whose first POST loses its response after the payments API accepted it. */
  dropRate: number;
  /** Share of messages whose memo the model re-words when it answers a retried request. */
  rewordRate: number;
  seed: string;
  /** The stream side the incident and the chaos run run on (ai-sdk: the chaos run uses openai's runner). */
  provider: DemoProvider;
  ledger: LedgerSpec;
  /** Table (SQLite, PostgreSQL) or key prefix (Redis) the demo's ledger rows live in; default: unique per run. */
  ledgerNamespace?: string;
  /** Keep the ledger's rows, table or file after the run (default: the demo removes what it created). */
  keepLedger: boolean;
  json: boolean;
  report?: string;
  /** Factor applied to every delay of the chaos run (payments latency, provider gaps, retry back-off). */
  timeScale: number;
  /** Factor applied to the incident's delays; 1 replays the chapter's 820 ms and 240 ms as they were. */
  incidentTimeScale: number;
  /** Conversations running at once in the chaos run. */
  concurrency: number;
  /** Messages delivered twice, concurrently, in the queue-redelivery route. */
  redeliveries: number;
  progress: boolean;
  help: boolean;
}

export const DEFAULT_OPTIONS: DemoOptions = {
  turns: 5_000,
  failureRate: 0.006,
  dropRate: 0.001,
  rewordRate: 0.5,
  seed: "1515",
  provider: "anthropic",
  ledger: { kind: "sqlite" },
  keepLedger: false,
  json: false,
  timeScale: 0.01,
  incidentTimeScale: 1,
  concurrency: 16,
  redeliveries: 50,
  progress: true,
  help: false,
};

/** A bad command line; the CLI prints the message and exits with code 2. */
export class DemoUsageError extends Error {
  readonly code = "bad_option";
  readonly option: string | undefined;
  constructor(message: string, option?: string) {
    super(message);
    this.name = "DemoUsageError";
    this.option = option;
  }
}

export const USAGE = `pnpm demo [options]   (or: node apps/demo/dist/cli.js [options])

Replays the chapter's incident (a payment made twice after a cut-off stream is retried),
then measures the same failure at scale, naive handler vs Dispatch-Once.

Options:
  --turns N              payment turns per side in the chaos run (default ${DEFAULT_OPTIONS.turns})
  --failure-rate P       share of turns whose stream fails once, 0 < P <= 1 (default ${DEFAULT_OPTIONS.failureRate}, the chapter's 0.6 %)
  --drop-rate P          share of payment turns whose first POST loses its response after the payments API
                         accepted it, 0 <= P <= 1 (default ${DEFAULT_OPTIONS.dropRate}: one in 1,000)
  --reword-rate P        share of messages whose memo a retried model response re-words, 0 <= P <= 1
                         (default ${DEFAULT_OPTIONS.rewordRate})
  --seed S               seed for every random decision; same seed, same counts (default ${DEFAULT_OPTIONS.seed})
  --provider P           the stream side, each its real SDK against its mock: anthropic (Messages API,
                         default) | openai (Responses API) | openai-chat (Chat Completions API,
                         ChatCompletionsRunner) | ai-sdk (the Vercel AI SDK's streamText over
                         @ai-sdk/openai, tools wrapped with createOnceTools; the chaos run then runs on
                         openai: the AI SDK's loop is the app's, not a runner the chaos run drives)
  --ledger SPEC          sqlite (temp file, default) | sqlite:PATH | postgres://... | redis://...
  --ledger-namespace N   table (sqlite, postgres) or key prefix (redis) to use (default: unique per run)
  --keep-ledger          keep the ledger rows/table/file afterwards (default: remove what the demo created)
  --time-scale F         scale the chaos run's delays, 0 < F <= 1 (default ${DEFAULT_OPTIONS.timeScale}: 820 ms -> 8.2 ms)
  --incident-time-scale F  scale the incident's delays (default 1: the chapter's 820 ms and 240 ms)
  --concurrency N        conversations running at once (default ${DEFAULT_OPTIONS.concurrency})
  --redeliveries N       messages delivered twice at once in the queue-redelivery route (default ${DEFAULT_OPTIONS.redeliveries})
  --json                 print exactly one JSON object on stdout (no progress bar, no tables)
  --report FILE          also write a self-contained HTML report (inline SVG, no external assets)
  --no-progress          no progress bar on stderr
  -h, --help             this text
`;

type Kind = "int" | "rate" | "share" | "scale" | "string" | "flag";

const SPECS: Record<string, { kind: Kind; key: keyof DemoOptions | "ledger" | "noProgress"; min?: number; max?: number }> = {
  "--turns": { kind: "int", key: "turns", min: 1, max: 10_000_000 },
  "--failure-rate": { kind: "rate", key: "failureRate" },
  "--drop-rate": { kind: "share", key: "dropRate" },
  "--reword-rate": { kind: "share", key: "rewordRate" },
  "--seed": { kind: "string", key: "seed" },
  "--provider": { kind: "string", key: "provider" },
  "--ledger": { kind: "string", key: "ledger" },
  "--ledger-namespace": { kind: "string", key: "ledgerNamespace" },
  "--keep-ledger": { kind: "flag", key: "keepLedger" },
  "--json": { kind: "flag", key: "json" },
  "--report": { kind: "string", key: "report" },
  "--time-scale": { kind: "scale", key: "timeScale" },
  "--incident-time-scale": { kind: "scale", key: "incidentTimeScale" },
  "--concurrency": { kind: "int", key: "concurrency", min: 1, max: 512 },
  "--redeliveries": { kind: "int", key: "redeliveries", min: 0, max: 100_000 },
  "--no-progress": { kind: "flag", key: "noProgress" },
  "--help": { kind: "flag", key: "help" },
  "-h": { kind: "flag", key: "help" },
};

const NAMESPACE_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,47}$/;

export function parseLedgerSpec(text: string): LedgerSpec {
  if (text === "sqlite") return { kind: "sqlite" };
  if (text.startsWith("sqlite:")) {
    const path = text.slice("sqlite:".length);
    if (path === "") throw new DemoUsageError("--ledger sqlite:PATH needs a file path after 'sqlite:'", "--ledger");
    return { kind: "sqlite", path };
  }
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new DemoUsageError(
      `--ledger ${JSON.stringify(text)} is not sqlite, sqlite:PATH, postgres://... or redis://...`,
      "--ledger",
    );
  }
  if (url.protocol === "postgres:" || url.protocol === "postgresql:") return { kind: "postgres", url: text };
  if (url.protocol === "redis:" || url.protocol === "rediss:") return { kind: "redis", url: text };
  throw new DemoUsageError(`--ledger: unsupported scheme ${JSON.stringify(url.protocol)}; use sqlite, postgres:// or redis://`, "--ledger");
}

/** Parse argv (without node and the script). Throws DemoUsageError on anything it does not understand. */
export function parseArgs(argv: readonly string[]): DemoOptions {
  const options: DemoOptions = { ...DEFAULT_OPTIONS };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    // `pnpm demo -- --turns 100` may pass the separator through.
    if (arg === "--") continue;
    const eq = arg.startsWith("--") ? arg.indexOf("=") : -1;
    const name = eq === -1 ? arg : arg.slice(0, eq);
    const spec = SPECS[name];
    if (spec === undefined) {
      throw new DemoUsageError(`unknown option ${JSON.stringify(name)}; see --help`, name);
    }
    if (spec.kind === "flag") {
      if (eq !== -1) throw new DemoUsageError(`${name} takes no value`, name);
      if (spec.key === "noProgress") options.progress = false;
      else (options as unknown as Record<string, unknown>)[spec.key] = true;
      continue;
    }
    let value: string | undefined;
    if (eq !== -1) value = arg.slice(eq + 1);
    else {
      value = argv[i + 1];
      if (value === undefined || (value.startsWith("--") && value.length > 2)) {
        throw new DemoUsageError(`${name} needs a value`, name);
      }
      i++;
    }
    assign(options, name, spec, value);
  }
  if (options.json) options.progress = false;
  return options;
}

function assign(options: DemoOptions, name: string, spec: (typeof SPECS)[string], value: string): void {
  const target = options as unknown as Record<string, unknown>;
  switch (spec.kind) {
    case "int": {
      if (!/^\d+$/.test(value)) throw new DemoUsageError(`${name} must be a whole number, got ${JSON.stringify(value)}`, name);
      const n = Number(value);
      if (n < (spec.min ?? 0) || n > (spec.max ?? Number.MAX_SAFE_INTEGER)) {
        throw new DemoUsageError(`${name} must be between ${spec.min} and ${spec.max}, got ${value}`, name);
      }
      target[spec.key] = n;
      return;
    }
    case "rate":
    case "scale": {
      const n = Number(value);
      if (value.trim() === "" || !Number.isFinite(n) || n <= 0 || n > 1) {
        throw new DemoUsageError(`${name} must be a number with 0 < ${name.slice(2)} <= 1, got ${JSON.stringify(value)}`, name);
      }
      target[spec.key] = n;
      return;
    }
    case "share": {
      // Zero is allowed: it switches the fault off.
      const n = Number(value);
      if (value.trim() === "" || !Number.isFinite(n) || n < 0 || n > 1) {
        throw new DemoUsageError(`${name} must be a number with 0 <= ${name.slice(2)} <= 1, got ${JSON.stringify(value)}`, name);
      }
      target[spec.key] = n;
      return;
    }
    case "string": {
      if (value === "") throw new DemoUsageError(`${name} must not be empty`, name);
      if (spec.key === "ledger") options.ledger = parseLedgerSpec(value);
      else if (spec.key === "ledgerNamespace") {
        if (!NAMESPACE_PATTERN.test(value)) {
          throw new DemoUsageError(`${name} must match ${NAMESPACE_PATTERN.source}, got ${JSON.stringify(value)}`, name);
        }
        options.ledgerNamespace = value;
      } else if (spec.key === "provider") {
        if (!(DEMO_PROVIDERS as readonly string[]).includes(value)) {
          throw new DemoUsageError(`${name} must be ${DEMO_PROVIDERS.slice(0, -1).join(", ")} or ${DEMO_PROVIDERS.at(-1)}, got ${JSON.stringify(value)}`, name);
        }
        options.provider = value as DemoProvider;
      } else if (spec.key === "seed") {
        if (value.length > 200) throw new DemoUsageError(`${name} is limited to 200 characters`, name);
        options.seed = value;
      } else target[spec.key] = value;
      return;
    }
  }
}
