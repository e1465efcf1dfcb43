import type { ClaimResult, Ledger, LedgerEffect, LedgerRow, StoredError } from "@dispatch-once/core";
import { isDeepStrictEqual } from "node:util";
import bundled from "../../../spec/vectors/ledger-transitions.json";
import { ConformanceFailure, codeOf, describeError, show } from "../failure.js";
import type { LedgerSubject, SubjectCapability } from "../types.js";
import { seededKey } from "./context.js";
import { rowEssence, textDiff } from "./support.js";

/** One step of spec/vectors/ledger-transitions.json (see its `description`). */
export interface VectorStep {
  op: "claim" | "complete" | "fail" | "markUnknown" | "release" | "renew" | "retire" | "resolve" | "auditTrail" | "lookup" | "expire_lease" | "expire_retention" | "expire_retired" | "sweep";
  key?: string;
  effect?: LedgerEffect;
  owner?: string;
  leaseMs?: number;
  /** The claim's request (LEDGER-21): JSON text the ledger stores and returns byte for byte. */
  request?: string;
  /** The claim's claim id (LEDGER-26), sent as given (a malformed one is expected to be refused). */
  claimId?: string;
  /** retire's options (LEDGER-28), sent as given (a malformed one is expected to be refused). */
  options?: unknown;
  /** resolve's request without its key (RESOLVE-1..5): every member sent as given, the step's key added. */
  resolveRequest?: Record<string, unknown>;
  fence?: number;
  result?: string;
  /** complete's result, or a resolve step's resolution.result: '"' + char repeated count times + '"'. */
  resultRepeat?: { char: string; count: number };
  error?: StoredError;
  reason?: string;
  expect?: Record<string, unknown> | null;
}

export interface VectorCase {
  id: string;
  rule: string;
  description: string;
  steps: VectorStep[];
}

export interface VectorFile {
  description?: string;
  cases: VectorCase[];
}

/**
 * The subject capabilities a case needs: `retire` for a case with a retire step (LEDGER-28), `resolve`
 * for one with a resolve step (RESOLVE-1..5), `auditTrail` for one with an auditTrail step (RESOLVE-7).
 */
export function vectorNeeds(vector: VectorCase): SubjectCapability[] {
  const needs: SubjectCapability[] = [];
  if (vector.steps.some((s) => s.op === "retire" || s.op === "expire_retired")) needs.push("retire");
  if (vector.steps.some((s) => s.op === "resolve")) needs.push("resolve");
  if (vector.steps.some((s) => s.op === "auditTrail")) needs.push("auditTrail");
  return needs;
}

/** The vectors bundled at build time from spec/vectors/ledger-transitions.json. */
export const BUNDLED_LEDGER_VECTORS = bundled as unknown as VectorFile;

/** The fixed tool name the vectors leave to the harness ("any fixed valid name"). */
const VECTOR_TOOL = "vector_tool";
/** The request of a claim step that names none (vectors written before LEDGER-21). */
const VECTOR_DEFAULT_REQUEST = "{}";
/** The vectors are written for this limit. */
export const VECTOR_MAX_RESULT_BYTES = 1_048_576;

export function parseVectorFile(value: unknown): VectorFile {
  if (typeof value !== "object" || value === null || !Array.isArray((value as VectorFile).cases)) {
    throw new TypeError("ledger vectors: expected an object with a `cases` array");
  }
  for (const c of (value as VectorFile).cases) {
    if (typeof c.id !== "string" || typeof c.rule !== "string" || !Array.isArray(c.steps)) {
      throw new TypeError(`ledger vectors: malformed case ${show(c)}`);
    }
  }
  return value as VectorFile;
}

/** Runs one vector case on a fresh namespace; throws with a step-by-step timeline at the first difference. */
export async function runVectorCase(subject: LedgerSubject, vector: VectorCase, options: { seed?: number } = {}): Promise<void> {
  const fixture = await subject.create({ maxResultBytes: VECTOR_MAX_RESULT_BYTES });
  const keys = new Map<string, string>();
  const keyOf = (label: string | undefined): string => {
    // The empty key is sent as it is: retire must refuse it (LEDGER-28).
    if (label === "") return "";
    const name = label ?? "k1";
    let key = keys.get(name);
    if (key === undefined) {
      // No randomness: each case runs in a fresh namespace, and the same seed gives the same keys.
      key = seededKey(options.seed ?? 0, `vector ${vector.id}`, name);
      keys.set(name, key);
    }
    return key;
  };
  const timeline: string[] = [];
  const ledger: Ledger = fixture.ledger;
  try {
    for (const [i, step] of vector.steps.entries()) {
      const t = i + 1;
      const head = `t=${t} ${describeVectorStep(step)}`;
      let actual: Record<string, unknown> | undefined;
      const expect = step.expect ?? undefined;
      try {
        actual = await performStep(ledger, fixture, step, keyOf(step.key));
      } catch (error) {
        actual = { threw: describeError(error) };
      }
      const problem = expect === undefined ? (actual?.threw ? `threw ${actual.threw}` : undefined) : compare(step, expect, actual);
      // The request is shown where the vector checks it (LEDGER-21), not on every claim.
      timeline.push(`${head} -> ${describeOutcome(actual, expect?.request !== undefined)}`);
      if (problem !== undefined) {
        timeline.push(`      ✗ expected ${describeOutcome(expect)}`);
        throw new ConformanceFailure(
          [`${vector.id} (${vector.rule}) step t=${t}: ${problem}`, `  ${vector.description}`, ...timeline.map((l) => `  ${l}`)].join("\n"),
        );
      }
    }
  } finally {
    await fixture.destroy();
  }
}

async function performStep(
  ledger: Ledger,
  fixture: Awaited<ReturnType<LedgerSubject["create"]>>,
  step: VectorStep,
  key: string,
): Promise<Record<string, unknown> | undefined> {
  const fenced = async (action: () => Promise<unknown>) => {
    try {
      await action();
      return { ok: true };
    } catch (error) {
      const code = codeOf(error);
      if (code === undefined) throw error;
      return { error: code };
    }
  };
  switch (step.op) {
    case "claim": {
      let result: ClaimResult;
      try {
        result = await ledger.claim({
          key,
          toolName: VECTOR_TOOL,
          effect: step.effect ?? "keyed_write",
          owner: step.owner ?? "a",
          leaseMs: step.leaseMs ?? 30_000,
          request: step.request ?? VECTOR_DEFAULT_REQUEST,
          ...(step.claimId === undefined ? {} : { claimId: step.claimId }),
        });
      } catch (error) {
        // A refused claim is compared by its code: a malformed claim id, or the claim id a released
        // row was released under (proposed LEDGER-27). Anything without a code is a failure.
        const code = codeOf(error);
        if (code === undefined) throw error;
        return { error: code };
      }
      if (result.outcome === "claimed") return { outcome: "claimed", fence: result.fence, takeover: result.takeover, request: result.request };
      return { outcome: "existing", ...rowFields(result.row) };
    }
    case "complete":
      return fenced(() => ledger.complete(key, step.fence!, resultText(step)));
    case "fail":
      return fenced(() => ledger.fail(key, step.fence!, step.error!));
    case "markUnknown":
      return fenced(() => ledger.markUnknown(key, step.fence!, step.reason!));
    case "release":
      return fenced(() => ledger.release(key, step.fence!));
    case "renew":
      return fenced(() => ledger.renew(key, step.fence!, step.leaseMs ?? 30_000));
    case "retire": {
      if (typeof ledger.retire !== "function") throw new TypeError("ledger vectors: a retire step on a ledger without retire");
      const retire = ledger.retire.bind(ledger) as (key: unknown, claimId: unknown, options?: unknown) => Promise<unknown>;
      try {
        const answer = (await retire(key, step.claimId, step.options)) as { released?: unknown } | undefined;
        return { released: answer?.released };
      } catch (error) {
        const code = codeOf(error);
        if (code === undefined) throw error;
        return { error: code };
      }
    }
    case "resolve": {
      if (typeof ledger.resolve !== "function") throw new TypeError("ledger vectors: a resolve step on a ledger without resolve");
      const resolve = ledger.resolve.bind(ledger) as (request: unknown) => Promise<LedgerRow>;
      // Sent as given (a malformed request is expected to be refused), the step's key added.
      const request = { key, ...structuredClone(step.resolveRequest ?? {}) } as Record<string, unknown> & { resolution?: Record<string, unknown> };
      if (step.resultRepeat !== undefined && typeof request.resolution === "object" && request.resolution !== null) request.resolution.result = resultText(step);
      try {
        return { outcome: "resolved", ...rowFields(await resolve(request)) };
      } catch (error) {
        const code = codeOf(error);
        if (code === undefined) throw error;
        const { state, field, key: named } = error as { state?: unknown; field?: unknown; key?: unknown };
        const refusal: Record<string, unknown> = { error: code };
        if (state !== undefined) refusal.state = state;
        if (field !== undefined) refusal.field = field;
        // resolution_refused carries the key it was sent (RESOLVE-2).
        if (code === "resolution_refused" && named !== key) refusal.wrongKey = named;
        return refusal;
      }
    }
    case "auditTrail": {
      if (typeof ledger.auditTrail !== "function") throw new TypeError("ledger vectors: an auditTrail step on a ledger without auditTrail");
      return { entries: await ledger.auditTrail(key) };
    }
    case "lookup": {
      const row = await ledger.lookup(key);
      return row === undefined ? { absent: true } : rowFields(row);
    }
    case "expire_lease":
      await fixture.raw.expireLease(key);
      return undefined;
    case "expire_retention":
      // The vectors allow "nothing to do" when the key is already absent (one shared clock).
      if ((await ledger.lookup(key)) !== undefined) await fixture.raw.expireRetention(key);
      return undefined;
    case "expire_retired":
      if (fixture.raw.expireRetired === undefined) throw new TypeError("ledger vectors: the subject declares retire but its fixture has no raw.expireRetired");
      await fixture.raw.expireRetired(key);
      return undefined;
    case "sweep":
      return { removed: await ledger.sweep() };
    default:
      throw new TypeError(`ledger vectors: unknown op ${show((step as { op: unknown }).op)}`);
  }
}

function resultText(step: VectorStep): string {
  if (step.resultRepeat !== undefined) return `"${step.resultRepeat.char.repeat(step.resultRepeat.count)}"`;
  return step.result!;
}

function rowFields(row: LedgerRow): Record<string, unknown> {
  const e = rowEssence(row)!;
  const out: Record<string, unknown> = { state: e.state, fence: e.fence };
  for (const f of ["owner", "result", "error", "reason"] as const) if (e[f] !== undefined) out[f] = e[f];
  out.request = row.request;
  return out;
}

/** Compares only the fields `expect` names (the vectors' rule); returns a description of the first difference. */
function compare(step: VectorStep, expect: Record<string, unknown>, actual: Record<string, unknown> | undefined): string | undefined {
  if (actual === undefined) return `no observable result`;
  if (actual.threw !== undefined) return `threw ${String(actual.threw)}`;
  if (actual.wrongKey !== undefined) return `${step.op} refused with ${show(actual.error)} naming key ${show(actual.wrongKey)}, not the key it was sent`;
  // A claim or resolve the vector expects refused must not have taken or written the row, and one it
  // expects to act must not be refused: said as such, not as a field that differs.
  if ((step.op === "claim" || step.op === "resolve") && typeof expect.error === "string" && expect.outcome === undefined && actual.outcome !== undefined) {
    return `${step.op} was accepted (${describeOutcome(actual)}), expected ${describeRefusal(expect)}`;
  }
  if ((step.op === "claim" || step.op === "resolve") && expect.outcome !== undefined && actual.outcome === undefined && typeof actual.error === "string") {
    return `${step.op} was refused with ${describeRefusal(actual)}, expected ${describeOutcome(expect)}`;
  }
  for (const [field, want] of Object.entries(expect)) {
    // LEDGER-19: once retention has passed a store MAY forget a row at any time (Redis expires it
    // itself), so sweep may count fewer rows than the vector names, never more. Whether the rows
    // are gone, and the in-flight ones kept, is checked by the vector's lookups.
    if (field === "removed" && step.op === "sweep" && typeof want === "number" && want > 0) {
      const removed = actual.removed;
      if (typeof removed !== "number" || !Number.isSafeInteger(removed) || removed < 0 || removed > want) {
        return `sweep reported ${show(removed)} removed, expected ${want} (or fewer, for rows the store already forgot)`;
      }
      continue;
    }
    if (field === "entries" && step.op === "auditTrail") {
      const problem = compareEntries(actual.entries, want as Record<string, unknown>[]);
      if (problem !== undefined) return problem;
      continue;
    }
    if (field === "removedAtMost") {
      const removed = actual.removed;
      if (typeof removed !== "number" || removed < 0 || removed > (want as number)) return `sweep reported ${show(removed)} removed, expected at most ${show(want)}`;
      continue;
    }
    if (!isDeepStrictEqual(actual[field], want)) {
      const got = actual[field];
      if (field === "error" && actual.ok === true) return `${step.op} was accepted, expected ${show(want)}`;
      if (field === "ok" && actual.error !== undefined) return `${step.op} raised ${show(actual.error)}, expected ok`;
      if (field === "result" && typeof want === "string" && typeof got === "string") {
        return `${step.op} returned a result that is not byte-for-byte the stored one (${Buffer.byteLength(got)} vs ${Buffer.byteLength(want)} bytes)`;
      }
      if (field === "request" && typeof want === "string") {
        const own = step.op === "claim" && got === (step.request ?? VECTOR_DEFAULT_REQUEST) ? " (the claimant's own)" : "";
        return `${step.op} returned a request that is not byte-for-byte the stored one${own}: ${textDiff(want, got)}`;
      }
      return `${step.op}: ${field} is ${show(got)}, expected ${show(want)}`;
    }
  }
  if (expect.absent === true && actual.absent !== true) return `lookup found a row, expected none`;
  return undefined;
}

/** RESOLVE-7: as many entries, in order, each member the vector names equal; `at` a number, never decreasing. */
function compareEntries(got: unknown, want: Record<string, unknown>[]): string | undefined {
  if (!Array.isArray(got)) return `auditTrail returned ${show(got)}, not a list`;
  const entries = got as Record<string, unknown>[];
  for (const [n, expected] of want.entries()) {
    const entry = entries[n];
    if (entry === undefined) return `auditTrail has ${entries.length} entries, expected ${want.length}: no entry ${n + 1} (${describeEntry(expected)})`;
    for (const [member, value] of Object.entries(expected)) {
      if (!isDeepStrictEqual(entry[member], value)) return `auditTrail entry ${n + 1}: ${member} is ${show(entry[member])}, expected ${show(value)} (${describeEntry(entry)})`;
    }
    const before = entries[n - 1]?.at;
    if (typeof entry.at !== "number" || (typeof before === "number" && entry.at < before)) return `auditTrail entry ${n + 1}: at is ${show(entry.at)}, not a time at or after the entry before's (${show(before)})`;
  }
  if (entries.length > want.length) return `auditTrail has ${entries.length} entries, expected ${want.length}: entry ${want.length + 1} is ${describeEntry(entries[want.length]!)}`;
  return undefined;
}

function describeEntry(e: Record<string, unknown>): string {
  return `${String(e.action)} by ${show(e.actor)} ${String(e.fromState)} -> ${String(e.toState)} fence=${String(e.fence)}${e.outcome === undefined ? "" : ` outcome ${String(e.outcome)}`}`;
}

function describeVectorStep(step: VectorStep): string {
  const key = step.key ?? "";
  switch (step.op) {
    case "claim":
      return `claim ${key} (${step.effect}) by ${step.owner}${step.claimId === undefined ? "" : ` claim id ${show(step.claimId)}`}${step.request === undefined ? "" : ` sending ${show(step.request)}`}`;
    case "complete":
      return `complete ${key} fence=${step.fence} with ${step.resultRepeat ? `"${step.resultRepeat.char}"×${step.resultRepeat.count}` : show(step.result)}`;
    case "fail":
      return `fail ${key} fence=${step.fence} with ${step.error?.name}`;
    case "markUnknown":
      return `markUnknown ${key} fence=${step.fence} reason ${step.reason}`;
    case "release":
      return `release ${key} fence=${step.fence}`;
    case "renew":
      return `renew ${key} fence=${step.fence}`;
    case "retire":
      return `retire ${key} claim id ${show(step.claimId)}${step.options === undefined ? "" : ` options ${show(step.options)}`}`;
    case "resolve": {
      const r = step.resolveRequest ?? {};
      const outcome = (r.resolution as { outcome?: unknown } | undefined)?.outcome;
      // The members a well-formed request always has are shown only when the step makes them odd.
      const plain = (m: string) => (m === "actor" || m === "reason") && typeof r[m] === "string" && (r[m] as string).length > 0;
      const others = Object.keys(r).filter((m) => m !== "resolution" && m !== "expectedFence" && !plain(m));
      return `resolve ${key} ${show(outcome)}${r.expectedFence === undefined ? "" : ` expectedFence=${show(r.expectedFence)}`}${step.resultRepeat ? ` result "${step.resultRepeat.char}"×${step.resultRepeat.count}` : ""}${others.length === 0 ? "" : ` (${others.map((m) => `${m} ${show(r[m])}`).join(", ")})`}`;
    }
    case "sweep":
      return "sweep";
    default:
      return `${step.op} ${key}`;
  }
}

/** A refusal as the vectors name it: its code, quoted as elsewhere, and the state or member it carries. */
function describeRefusal(o: Record<string, unknown>): string {
  return `${show(o.error)}${o.state === undefined ? "" : ` (state ${show(o.state)})`}${o.field === undefined ? "" : ` (field ${show(o.field)})`}`;
}

function describeOutcome(o: Record<string, unknown> | undefined, withRequest = true): string {
  if (o === undefined) return "done";
  if (o.threw !== undefined) return `threw ${String(o.threw)}`;
  if (o.absent === true) return "no row";
  if (o.ok === true) return "ok";
  if (typeof o.error === "string" && o.outcome === undefined) {
    // A refusal: its code, and the state or member it names (resolution_refused, invalid_ledger_input).
    return `${o.error}${o.state === undefined ? "" : ` (state ${String(o.state)})`}${o.field === undefined ? "" : ` (field ${String(o.field)})`}`;
  }
  if (o.removed !== undefined) return `removed ${String(o.removed)}`;
  if (Array.isArray(o.entries)) return o.entries.length === 0 ? "no entries" : (o.entries as Record<string, unknown>[]).map(describeEntry).join("; ");
  if (o.released !== undefined) return `released ${String(o.released)}`;
  const bits: string[] = [];
  if (o.outcome !== undefined) bits.push(String(o.outcome));
  if (o.state !== undefined) bits.push(String(o.state));
  if (o.fence !== undefined) bits.push(`fence=${String(o.fence)}`);
  if (o.takeover === true) bits.push("(takeover)");
  if (o.owner !== undefined) bits.push(`owner=${String(o.owner)}`);
  if (o.result !== undefined) bits.push(`result=${show(o.result)}`);
  if (o.error !== undefined) bits.push(`error=${show((o.error as StoredError).name)}`);
  if (o.reason !== undefined) bits.push(`reason=${String(o.reason)}`);
  if (withRequest && o.request !== undefined) bits.push(`request=${show(o.request)}`);
  return bits.join(" ");
}
