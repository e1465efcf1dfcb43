import type { Check, LedgerCheckOptions, LedgerSubject, SubjectCapability } from "../types.js";
import { LEDGER_CHECK_SPECS } from "./checks.js";
import { MODEL_CHECK_NAME, runModelProperty } from "./property.js";
import { RESULT_PROPERTY_NAME, runResultProperty } from "./result-property.js";
import { BUNDLED_LEDGER_VECTORS, parseVectorFile, runVectorCase } from "./vectors.js";

const CAPABILITY_WORDS: Record<SubjectCapability, string> = {
  sharedAcrossProcesses: "needs sharedAcrossProcesses (one winner across instances)",
  survivesRestart: "needs survivesRestart (a fresh instance sees earlier rows)",
  corruption: "needs corruption (raw.corrupt)",
  unavailability: "needs unavailability (raw.disconnected)",
};

/** A seed for property checks when none is given; always reported so a failure can be replayed. */
export function randomSeed(): number {
  return (Date.now() ^ (Math.random() * 0x7fffffff)) | 0;
}

/**
 * Every ledger-level check for a subject: the deterministic checks (one per rule aspect), the
 * model-based property check, and the spec's ledger-transition vectors. Checks that need a
 * capability the subject does not declare are returned with `applicable: false` and a reason.
 */
export function ledgerChecks(subject: LedgerSubject, options: LedgerCheckOptions = {}): Check[] {
  validateSubject(subject);
  // CI sizes runs and pins seeds through the environment (turbo passes CONFORMANCE_RUNS / CONFORMANCE_SEED).
  const runs = options.runs ?? envInteger("CONFORMANCE_RUNS") ?? 100;
  const seed = options.seed ?? envInteger("CONFORMANCE_SEED") ?? randomSeed();
  const checks: Check[] = LEDGER_CHECK_SPECS.map((spec) => {
    const missing = (spec.needs ?? []).filter((c) => !subject.capabilities[c]);
    const check: Check = { rule: spec.rule, name: spec.name, applicable: missing.length === 0, run: () => spec.run(subject) };
    if (missing.length > 0) check.reasonNotApplicable = missing.map((c) => CAPABILITY_WORDS[c]).join("; ");
    return check;
  });
  checks.push({
    rule: "LEDGER-3",
    name: `${MODEL_CHECK_NAME} (${options.path === undefined ? `${runs} runs` : "replay"}, seed ${seed})`,
    applicable: true,
    run: () => runModelProperty(subject, { runs, seed, ...(options.path === undefined ? {} : { path: options.path }) }),
  });
  checks.push({
    rule: "LEDGER-10",
    name: `${RESULT_PROPERTY_NAME} (${options.path === undefined ? `${runs} runs` : "replay"}, seed ${seed})`,
    applicable: true,
    run: () => runResultProperty(subject, { runs, seed, ...(options.path === undefined ? {} : { path: options.path }) }),
  });
  const vectors = parseVectorFile(options.vectors ?? BUNDLED_LEDGER_VECTORS);
  for (const vector of vectors.cases) {
    checks.push({
      rule: vector.rule,
      name: `vector ${vector.id}: ${vector.description}`,
      applicable: true,
      run: () => runVectorCase(subject, vector),
    });
  }
  return checks;
}

/** The name prefix of the model-based check, for filtering (`--only model`). */
export const MODEL_CHECK_PREFIX = "model-based:";

export interface TestRegistrar {
  describe: (name: string, fn: () => void) => void;
  it: ((name: string, fn: () => Promise<void>, timeout?: number) => void) & {
    skip?: (name: string, fn: () => Promise<void>, timeout?: number) => void;
  };
}

/**
 * Registers checks with any describe/it runner (vitest, mocha, node:test). Test names are
 * `${rule} ${name}`; a not-applicable check is registered as a passing test whose name ends
 * with "(not applicable: <reason>)", so it is listed, never silently dropped.
 */
export function registerChecks(title: string, checks: readonly Check[], t: TestRegistrar, timeoutMs = 300_000): void {
  t.describe(title, () => {
    for (const check of checks) {
      if (check.applicable) {
        t.it(`${check.rule} ${check.name}`, () => check.run(), timeoutMs);
      } else {
        t.it(`${check.rule} ${check.name} (not applicable: ${check.reasonNotApplicable ?? "capability not declared"})`, async () => {}, timeoutMs);
      }
    }
  });
}

export function registerLedgerChecks(subject: LedgerSubject, t: TestRegistrar, options?: LedgerCheckOptions): void {
  registerChecks(`@dispatch-once/conformance ledger level: ${subject.name}`, ledgerChecks(subject, options), t);
}

function envInteger(name: string): number | undefined {
  const text = typeof process === "undefined" ? undefined : process.env[name];
  if (text === undefined || text === "") return undefined;
  const value = Number(text);
  if (!Number.isSafeInteger(value)) throw new TypeError(`${name} must be an integer, got ${JSON.stringify(text)}`);
  return value;
}

function validateSubject(subject: LedgerSubject): void {
  if (typeof subject !== "object" || subject === null) throw new TypeError("ledger subject: expected an object");
  if (typeof subject.name !== "string" || subject.name === "") throw new TypeError("ledger subject: `name` must be a non-empty string");
  if (typeof subject.create !== "function") throw new TypeError(`ledger subject ${subject.name}: \`create\` must be a function`);
  const caps = subject.capabilities as unknown as Record<string, unknown> | undefined;
  for (const flag of ["sharedAcrossProcesses", "survivesRestart", "corruption", "unavailability"]) {
    if (typeof caps?.[flag] !== "boolean") {
      throw new TypeError(`ledger subject ${subject.name}: capabilities.${flag} must be declared as true or false`);
    }
  }
}
