/**
 * Every default of the kit in one place, read by the API (ledgerChecks, runChecks) and by the CLI
 * alike, so that a certification means the same thing however it is started. The environment
 * variables are how CI sizes runs and pins seeds (turbo passes them through).
 */

/** Runs of each ledger-level property check: CONFORMANCE_RUNS, else this. */
export const DEFAULT_RUNS = 100;

/**
 * Runs of the end-to-end property (level 2, CONF-2, in @dispatch-once/conformance-e2e):
 * CONFORMANCE_E2E_RUNS, else this. Kept here so that the CLI resolves every level's runs the same
 * way whether or not that package is installed; CI certifies every ledger with 1,000.
 */
export const DEFAULT_END_TO_END_RUNS = 1000;

/**
 * Time limit of one deterministic check, and of every 100 runs of a property check:
 * CONFORMANCE_CHECK_TIMEOUT_MS, else this. The slowest deterministic check waits about 3 s of real
 * time (retention); a healthy adapter finishes any check in a few seconds.
 */
export const DEFAULT_CHECK_TIMEOUT_MS = 60_000;

/** Time limit of a whole run (every check of every level): CONFORMANCE_TIMEOUT_MS, else this. */
export const DEFAULT_RUN_TIMEOUT_MS = 60 * 60 * 1000;

/**
 * After this many checks in a row time out, the adapter is taken to be hung: the remaining checks
 * are reported failed without running, so a hung adapter fails in a bounded time.
 */
export const MAX_CONSECUTIVE_TIMEOUTS = 3;

/** The environment variables the kit reads, with what they set (documented in the README). */
export const ENVIRONMENT = {
  CONFORMANCE_RUNS: `runs of each ledger-level property check (default ${DEFAULT_RUNS})`,
  CONFORMANCE_E2E_RUNS: "runs of the end-to-end property (default DEFAULT_END_TO_END_RUNS, 1000)",
  CONFORMANCE_SEED: "seed of every random choice of every level (default random, always reported)",
  CONFORMANCE_CHECK_TIMEOUT_MS: `time limit of one check, of every 100 runs of a property check and of every 20 end-to-end runs (default ${DEFAULT_CHECK_TIMEOUT_MS})`,
  CONFORMANCE_TIMEOUT_MS: `time limit of a whole CLI run (default ${DEFAULT_RUN_TIMEOUT_MS})`,
} as const;

export type EnvironmentVariable = keyof typeof ENVIRONMENT;

/** An integer from the environment, or undefined when unset or empty; anything else is refused. */
export function envInteger(name: EnvironmentVariable, min = Number.MIN_SAFE_INTEGER): number | undefined {
  const text = typeof process === "undefined" ? undefined : process.env[name];
  if (text === undefined || text === "") return undefined;
  const value = Number(text);
  if (!/^-?\d+$/.test(text.trim()) || !Number.isSafeInteger(value) || value < min) {
    throw new TypeError(`${name} must be an integer >= ${min}, got ${JSON.stringify(text)}`);
  }
  return value;
}

/** A seed for property checks when none is given; always reported so a failure can be replayed. */
export function randomSeed(): number {
  return (Date.now() ^ (Math.random() * 0x7fffffff)) | 0;
}

/** The ledger level's options with every default applied: what a run actually uses. */
export interface ResolvedLedgerOptions {
  runs: number;
  seed: number;
  path?: string;
  checkTimeoutMs: number;
}

export function resolveLedgerOptions(options: { runs?: number; seed?: number; path?: string; checkTimeoutMs?: number } = {}): ResolvedLedgerOptions {
  const resolved: ResolvedLedgerOptions = {
    runs: options.runs ?? envInteger("CONFORMANCE_RUNS", 1) ?? DEFAULT_RUNS,
    seed: options.seed ?? envInteger("CONFORMANCE_SEED") ?? randomSeed(),
    checkTimeoutMs: options.checkTimeoutMs ?? envInteger("CONFORMANCE_CHECK_TIMEOUT_MS", 1) ?? DEFAULT_CHECK_TIMEOUT_MS,
  };
  if (options.path !== undefined) resolved.path = options.path;
  return resolved;
}

/** The time limit of a property check: the per-check limit for every 100 runs (a replay is one run). */
export function propertyTimeoutMs(checkTimeoutMs: number, runs: number, replay = false): number {
  return checkTimeoutMs * Math.max(1, Math.ceil((replay ? 1 : runs) / 100));
}

/**
 * End-to-end runs one check-timeout covers. A run is a whole conversation through the runner,
 * the SDK and the mocks (0.5-0.6 s a run on the PostgreSQL ledger on a 2-core host), where a
 * ledger property's run is a few store calls: at 100 runs per limit, a certification of a
 * healthy PostgreSQL ledger at 200 runs was cut off by its own time limit after 174.
 */
export const END_TO_END_RUNS_PER_CHECK_TIMEOUT = 20;

/** The time limit of the end-to-end property: the per-check limit for every 20 runs (a replay is one run). */
export function endToEndTimeoutMs(checkTimeoutMs: number, runs: number, replay = false): number {
  return checkTimeoutMs * Math.max(1, Math.ceil((replay ? 1 : runs) / END_TO_END_RUNS_PER_CHECK_TIMEOUT));
}
