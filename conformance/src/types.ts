import type { Ledger } from "@dispatch-once/core";

/**
 * What an adapter's test gives the kit (like @keyv/test-suite's factory and abstract-level's
 * capability flags). Checks that need a capability the subject lacks are reported
 * "not applicable", never silently skipped.
 */
export interface LedgerSubject {
  /** e.g. "ledger-postgres" */
  name: string;
  capabilities: SubjectCapabilities;
  /** Create a ledger over a FRESH, ISOLATED namespace (new table/prefix/file). Called many times; must be cheap-ish. */
  create(options?: { retentionMs?: number; maxResultBytes?: number }): Promise<LedgerFixture>;
}

export interface SubjectCapabilities {
  /** Several processes / instances over one store get one winner per key (true for sqlite file, postgres, redis). */
  sharedAcrossProcesses: boolean;
  /** A fresh instance over the same store sees rows written by an earlier one (restart survives). */
  survivesRestart: boolean;
  /** The test hooks can corrupt a stored row (raw.corrupt). */
  corruption: boolean;
  /** The subject's store can be made unreachable for the unavailability check (raw.disconnected). */
  unavailability: boolean;
}

export type SubjectCapability = keyof SubjectCapabilities;

export interface LedgerFixture {
  ledger: Ledger;
  /** Another ledger instance over the SAME namespace (a restart, or a second process's view). */
  reopen(): Promise<Ledger>;
  /** Direct store access (Auth.js style: assertions read storage, not only the adapter). */
  raw: {
    /** The row as stored, decoded by the test hook itself (not via the adapter), or undefined. Field names as core's LedgerRow. */
    read(key: string): Promise<Record<string, unknown> | undefined>;
    /** Make the lease of the key's current in-flight claim lie in the past (store clock). */
    expireLease(key: string): Promise<void>;
    /** Make a finished/released row's retention lie in the past. */
    expireRetention(key: string): Promise<void>;
    /** Overwrite the stored row with bytes the adapter cannot decode (only when capabilities.corruption). */
    corrupt?(key: string): Promise<void>;
    /** Return a ledger instance whose connection is broken/refused (only when capabilities.unavailability). */
    disconnected?(): Promise<Ledger>;
  };
  /** Drop the namespace and close every ledger instance created from this fixture. */
  destroy(): Promise<void>;
}

/** One named check. `rule` is a spec rule id (spec/rules.json), e.g. "LEDGER-5". */
export interface Check {
  rule: string;
  name: string;
  run(): Promise<void>;
  applicable: boolean;
  reasonNotApplicable?: string;
}

export interface LedgerCheckOptions {
  /** Runs of each property (model-based) check. Default 100. */
  runs?: number;
  /** Seed of the property checks; random when absent (always printed on failure). */
  seed?: number;
  /** fast-check replay path printed with a counterexample; replays exactly that case. */
  path?: string;
  /** Ledger-transition vectors (spec/vectors/ledger-transitions.json); the bundled copy when absent. */
  vectors?: unknown;
}

export type CheckStatus = "pass" | "fail" | "not_applicable";

/** A shrunk failing case of a property check, replayable with `--seed S --path P`. */
export interface Counterexample {
  seed: number;
  path: string;
  /** One line per step: `t=3 claim k1 by owner-b -> existing in_flight fence=2`. */
  timeline: string[];
  /** The rule the failing step breaks, when the check can tell (a model check covers several). */
  violates?: string;
  /** fast-check's own report (seed, path, shrunk value, error). */
  report?: string;
  /** The shrunk input as data. */
  value?: unknown;
}

export interface CheckResult {
  rule: string;
  name: string;
  status: CheckStatus;
  error?: string;
  reasonNotApplicable?: string;
  counterexample?: Counterexample;
  /** Further rules this failing check shows broken (a model check names the step's rule). */
  violates?: string[];
  durationMs?: number;
}

export type RuleRequirement = "MUST" | "SHOULD" | "MAY";

export interface RuleSummary {
  rule: string;
  title: string;
  requirement: RuleRequirement;
  status: CheckStatus;
  passed: number;
  failed: number;
  notApplicable: number;
}

export interface Report {
  subject: string;
  /** Which levels ran: "ledger" (and later "e2e"). */
  levels: string[];
  seed?: number;
  runs?: number;
  startedAt: string;
  finishedAt: string;
  /** True when every MUST rule that applies passes. */
  conforms: boolean;
  rules: RuleSummary[];
  checks: CheckResult[];
}
