import type { ConversationStore, Ledger } from "@dispatch-once/core";
import type { StoreAddress } from "./silent/silence-proxy.js";

/**
 * What an adapter's test gives the kit (like @keyv/test-suite's factory and abstract-level's
 * capability flags). Checks that need a capability the subject lacks are reported
 * "not applicable", never silently skipped.
 */
export interface LedgerSubject {
  /** e.g. "ledger-postgres" */
  name: string;
  capabilities: SubjectCapabilities;
  /**
   * The bounds the adapter documents, as configured in the instances the fixture opens. Required
   * with `capabilities.silentStore`: `operationBoundMs` is LEDGER-12's bound on every operation
   * (waiting for a connection, connecting and retries included) of an instance from `raw.openVia`.
   */
  limits?: { operationBoundMs?: number };
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
  /**
   * Optional: the fixture can open an instance whose PROCESS clock is skewed (raw.skewedInstance), as
   * another host's would be. The store-clock check (LEDGER-20) then compares leases issued through it
   * with leases issued through an instance on the true clock. Absent means false.
   */
  clockSkew?: boolean;
  /**
   * Optional: the ledger offers listRows (LIST-*), resolve (RESOLVE-1..RESOLVE-5, RESOLVE-8) and
   * auditTrail (RESOLVE-7). Each must agree with the ledger's own `capabilities.supports` flag
   * (checked), so their checks are not applicable only where the ledger says the method is absent.
   * Absent means false.
   */
  listRows?: boolean;
  resolve?: boolean;
  auditTrail?: boolean;
  /**
   * Optional: the ledger offers retire (LEDGER-28), and must agree with `capabilities.supports.retire`
   * (checked). Its checks, and the vectors with a retire step, are not applicable without it. A
   * subject that declares it gives `raw.expireRetired` too. Absent means false.
   */
  retire?: boolean;
  /**
   * Optional: the ledger offers listExpiredInFlight (LEDGER-25). Declared (true or false), it must
   * agree with `capabilities.supports.listExpiredInFlight` (checked). Absent, the LEDGER-25 checks
   * are reported not applicable, whatever the ledger offers: declare it to have them run.
   */
  listExpiredInFlight?: boolean;
  /**
   * Optional: the fixture can open an instance whose store connection goes through the kit's
   * SilenceProxy (raw.storeAddress, raw.openVia), and the subject declares its bound
   * (`limits.operationBoundMs`). LEDGER-12's silent-store checks then make the store stop answering
   * (paused, partitioned with no RST), after the first connection and before it, and require every
   * operation to reject with ledger_unavailable within the bound. Absent means false; a store with no
   * connection to lose (an embedded file) declares false.
   */
  silentStore?: boolean;
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
    /**
     * Make the retention of every claim id retired for the key lie in the past (LEDGER-28), as if it
     * had been retired longer ago than the retention; only when capabilities.retire.
     */
    expireRetired?(key: string): Promise<void>;
    /** Overwrite the stored row with bytes the adapter cannot decode (only when capabilities.corruption). */
    corrupt?(key: string): Promise<void>;
    /** Return a ledger instance whose connection is broken/refused (only when capabilities.unavailability). */
    disconnected?(): Promise<Ledger>;
    /** Where the store listens (TCP): the kit starts its SilenceProxy in front of it. Only when capabilities.silentStore. */
    storeAddress?(): Promise<StoreAddress>;
    /**
     * Another instance over the SAME namespace that connects to `via` (the kit's proxy) instead of the
     * store, with the bound `limits.operationBoundMs`; only when capabilities.silentStore. It must
     * return without reaching the store (no migration, no probe): the kit may call it while the store
     * is silent. destroy() closes it.
     */
    openVia?(via: StoreAddress): Promise<Ledger>;
    /**
     * Another instance over the SAME namespace whose process clock reads `offsetMs` off the true time (as
     * on a host whose clock is wrong); only when capabilities.clockSkew. A ledger on the store's clock
     * behaves exactly as through any other instance; one on the process clock does not (LEDGER-20).
     */
    skewedInstance?(offsetMs: number): Promise<Ledger>;
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
  /**
   * Longest the check may take before it fails with "timed out" and what was pending (a property check's
   * budget grows with its runs). runChecks and registerChecks fall back to their own default when absent.
   */
  timeoutMs?: number;
  /** The subject's operations in flight right now, one line each (reported when the check times out). */
  pending?(): string[];
}

export interface LedgerCheckOptions {
  /** Runs of each property (model-based) check. Default $CONFORMANCE_RUNS, else 100. */
  runs?: number;
  /**
   * Seed of every random choice of the level: property inputs, and the keys and durations the
   * deterministic checks use. Default $CONFORMANCE_SEED, else random (always reported).
   */
  seed?: number;
  /** fast-check replay path printed with a counterexample; replays exactly that one case. */
  path?: string;
  /** Ledger-transition vectors (spec/vectors/ledger-transitions.json); the bundled copy when absent. */
  vectors?: unknown;
  /**
   * Time limit of one deterministic check, and of every 100 runs of a property check, in ms.
   * Default $CONFORMANCE_CHECK_TIMEOUT_MS, else 60,000. A check over it fails, naming what was pending.
   */
  checkTimeoutMs?: number;
}

/**
 * "inconclusive": the check could not conclude on any of its attempts (CheckInconclusive, CONF-5): no
 * violation was found and nothing was certified. A MUST rule inconclusive does not conform.
 */
export type CheckStatus = "pass" | "fail" | "inconclusive" | "not_applicable";

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
  /** What the reader must know about this counterexample, e.g. that it passed when replayed (timing-dependent). */
  note?: string;
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
  /** Why the check did not finish: its own time limit, the run's, or a promise nothing could settle. */
  timedOut?: "check" | "run" | "idle" | "not_run";
  /**
   * A property its time limit stopped before its runs were done, none of the runs it made failing
   * (ConformanceFailure.interrupted): the check fails, since it certifies nothing, but found no violation.
   */
  interrupted?: true;
  /** The subject's operations that were still in flight when the check was stopped. */
  pending?: string[];
  /** How many times the check ran, when more than once: a run that could not conclude is run again on a fresh fixture (CONF-5). */
  attempts?: number;
  /** Why each run that could not conclude did not (CheckInconclusive), in order: the check's final status is the last run's. */
  inconclusiveRuns?: string[];
}

export type RuleRequirement = "MUST" | "SHOULD" | "MAY";

export interface RuleSummary {
  rule: string;
  title: string;
  requirement: RuleRequirement;
  status: CheckStatus;
  passed: number;
  /** Failing checks, the interrupted ones included (they certify nothing). */
  failed: number;
  notApplicable: number;
  /** Of `failed`, the property checks their time limit stopped without a violation. */
  interrupted?: number;
  /** Checks that could not conclude on any attempt (CONF-5): no violation found, not certified. */
  inconclusive?: number;
}

export interface Report {
  subject: string;
  /** Which levels ran: "ledger" (and later "e2e"). */
  levels: string[];
  seed?: number;
  /** Runs of the ledger level's property checks (of the only level's, when one other level ran). */
  runs?: number;
  /** Runs of each level's property checks, e.g. { ledger: 100, e2e: 1000 }. */
  runsByLevel?: Record<string, number>;
  /** The stream side the end-to-end level ran on, when it ran. */
  provider?: string;
  startedAt: string;
  finishedAt: string;
  /** True when every MUST rule that applies passes (a failing or inconclusive one does not). */
  conforms: boolean;
  rules: RuleSummary[];
  checks: CheckResult[];
}

/** What the CLI hands every level: the resolved settings of one run. */
export interface LevelOptions {
  runs: number;
  seed: number;
  /** The end-to-end level's stream side ("anthropic", "openai"); the ledger level has none. */
  provider?: string;
  path?: string;
  vectors?: unknown;
  checkTimeoutMs: number;
  /**
   * The end-to-end level only: the conversation store under the turn runner, one per conversation
   * of each case (a --store subject's `conversationStore`). Absent: the reference in-memory store.
   */
  conversationStore?: (options: { now: () => number }) => ConversationStore;
}

/**
 * A level of the kit as the CLI drives it. The ledger level is built in; the end-to-end level is
 * `endToEndLevel` of `@dispatch-once/conformance-e2e`, loaded only when asked for, so that this
 * package depends on core and fast-check alone.
 */
export interface ConformanceLevel<S = LedgerSubject> {
  /** The level's checks for a subject, with the CLI's fail-closed limits applied. */
  checks(subject: S, options: LevelOptions): Check[];
  /**
   * True when the level runs `LevelOptions.conversationStore` under its runner (the end-to-end
   * level since it took one). A level without it would ignore the store and certify another: the
   * CLI refuses to run a --store subject on it.
   */
  takesConversationStore?: boolean;
  /** True for the check a `--path` of this level replays (a property check). */
  replayable(check: Check): boolean;
  /** For a property check, the `--only` text that names it in a printed replay command. */
  property(check: Pick<Check, "name">): string;
}
