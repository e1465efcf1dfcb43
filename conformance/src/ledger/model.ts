import fc from "fast-check";
import { isDeepStrictEqual } from "node:util";
import type { ClaimResult, Ledger, LedgerEffect, RowState, StoredError } from "@dispatch-once/core";
import { ConformanceFailure, codeOf, describeError, show } from "../failure.js";
import type { LedgerFixture, LedgerSubject } from "../types.js";
import { seededKey } from "./context.js";
import { LEASE_MS, TOOL_FOR, claimRequest, rowEssence, textDiff } from "./support.js";

/**
 * One step of a random scenario. Steps name keys, owners and payloads by index so that
 * fast-check can shrink a failing sequence by dropping steps: an owner's fence is whatever
 * its last successful claim of the key returned, so a shrunk sequence stays meaningful.
 */
export type Step =
  /** `request` indexes the key's MODEL_REQUESTS: what this claimant would send (LEDGER-21). */
  | { op: "claim"; key: number; owner: number; via: number; request: number }
  /** The i-th racer sends request (request + i) mod MODEL_REQUESTS_PER_KEY, so racers' requests differ. */
  | { op: "race"; key: number; owners: number[]; request: number }
  | { op: "complete"; key: number; owner: number; via: number; result: number }
  | { op: "fail"; key: number; owner: number; via: number; error: number }
  | { op: "markUnknown"; key: number; owner: number; via: number; reason: number }
  | { op: "release"; key: number; owner: number; via: number }
  | { op: "renew"; key: number; owner: number; via: number }
  | { op: "lookup"; key: number; via: number }
  | { op: "expire_lease"; key: number }
  | { op: "sweep"; via: number }
  | { op: "restart" }
  /**
   * The key's latest claimant completes while `owner` claims, concurrently (a zombie owner vs a
   * takeover, or an expiring unkeyed_write claim turning unknown). `first` is which call is issued
   * first: a ledger whose claim reads, awaits and writes loses only when the claim goes first.
   */
  | { op: "contend"; key: number; owner: number; result: number; request: number; first: "complete" | "claim" };

/** The scenario's keys: label and effect class (a key's effect is fixed, as its tool's is). */
export const MODEL_KEYS: ReadonlyArray<{ label: string; effect: LedgerEffect }> = [
  { label: "k1", effect: "keyed_write" },
  { label: "k2", effect: "unkeyed_write" },
  { label: "k3", effect: "keyed_write" },
];
export const MODEL_OWNERS = ["owner-a", "owner-b", "owner-c"] as const;
/** Owner index meaning "whoever made the latest successful claim of the key" (owner-a if none). */
export const HOLDER = MODEL_OWNERS.length;
export const MODEL_RESULTS = [
  '{"id":"pay_1","amount":1200}',
  '{ "b" : 1 ,\n\t"a" : [ ] }',
  '"café ☕ 😀"',
  '"caf\\u00e9"',
  "[1.0, 1e2, -0, 12345678901234567890]",
  "null",
];
export const MODEL_ERRORS: StoredError[] = [
  { name: "CardDeclinedError", message: "card declined", code: "card_declined", details: { decline_code: "do_not_honor" } },
  { name: "ToolError", message: "ünïcödé 😀 failure" },
];
export const MODEL_REASONS = ["tool_error", "connection_reset"];

/**
 * The requests claimants of a key send (LEDGER-21): distinct per key and per attempt, so a ledger
 * that stores a later claimant's request, returns the claimant's own, loses it, or changes its
 * bytes (re-encoding, normalising, truncating) shows it. Every one is a JSON text, as a dispatcher's is.
 */
function requestsFor(label: string): string[] {
  const lines: string[] = [];
  for (let i = 0; lines.join(",").length < 18_000; i++) lines.push(`"Zeile ${i}: Zahlung №${i} – ✓ 東京 😀 ${"x".repeat(i % 7)}"`);
  return [
    `{"payee":"acct_991","amount":1200,"currency":"EUR","ref":"${label}"}`,
    // Written the way no re-encoder writes it: spaces, member order, number spelling, escapes kept escaped.
    `{ "ref" : "${label}",\n\t"memo" : "caf\\u00e9 \\ud83d\\ude00 \\"quoted\\" \\\\ \\/ \\n", "amount" : 1200.50 }`,
    // Raw multi-byte UTF-8: 3-byte characters, a combining mark (not NFC-normalised), an astral one, U+2028.
    `{"ref":"${label}","memo":"東京 – €12 – ☕ – ｶﾀｶﾅ – e\u0301 – 😀 – \u2028 – \u200b"}`,
    // Large-ish (about 23 KB, over 16 Ki UTF-16 units): a column or value size limit truncates it.
    `{"ref":"${label}","lines":[${lines.join(",")}]}`,
  ];
}
export const MODEL_REQUESTS: ReadonlyArray<readonly string[]> = MODEL_KEYS.map((k) => requestsFor(k.label));
export const MODEL_REQUESTS_PER_KEY = MODEL_REQUESTS[0]!.length;
const REQUEST_LABELS = new Map<string, string>(
  MODEL_REQUESTS.flatMap((texts, k) => texts.map((text, i) => [text, `${MODEL_KEYS[k]!.label}#${i}`] as [string, string])),
);

/** `k1#2` for a request of the scenario; otherwise what was returned instead, briefly. */
export function requestLabel(text: unknown): string {
  if (text === undefined) return "(none)";
  if (typeof text !== "string") return `(not a string: ${show(text)})`;
  return REQUEST_LABELS.get(text) ?? `(unrecognised, ${Buffer.byteLength(text)} bytes: ${show(text.slice(0, 48))}${text.length > 48 ? "…" : ""})`;
}

/** Which steps a subject can take: restart only when it survives one, a second instance only when shared. */
export function stepArbitrary(capabilities: { survivesRestart: boolean; sharedAcrossProcesses: boolean }): fc.Arbitrary<Step> {
  const key = fc.nat({ max: MODEL_KEYS.length - 1 });
  const owner = fc.nat({ max: MODEL_OWNERS.length - 1 });
  // Owner operations name "the latest claimant" half the time, so that valid transitions are
  // as common as stale ones; it is resolved when the step runs.
  const actor = fc.oneof(fc.constant(HOLDER), owner);
  const via = capabilities.sharedAcrossProcesses ? fc.nat({ max: 1 }) : fc.constant(0);
  const request = fc.nat({ max: MODEL_REQUESTS_PER_KEY - 1 });
  const arbs: Array<{ arbitrary: fc.Arbitrary<Step>; weight: number }> = [
    { weight: 6, arbitrary: fc.record({ op: fc.constant("claim" as const), key, owner, via, request }) },
    {
      weight: 2,
      arbitrary: fc.record({
        op: fc.constant("race" as const),
        key,
        owners: fc.uniqueArray(owner, { minLength: 2, maxLength: MODEL_OWNERS.length }),
        request,
      }),
    },
    {
      weight: 3,
      arbitrary: fc.record({ op: fc.constant("complete" as const), key, owner: actor, via, result: fc.nat({ max: MODEL_RESULTS.length - 1 }) }),
    },
    {
      weight: 2,
      arbitrary: fc.record({ op: fc.constant("fail" as const), key, owner: actor, via, error: fc.nat({ max: MODEL_ERRORS.length - 1 }) }),
    },
    {
      weight: 1,
      arbitrary: fc.record({ op: fc.constant("markUnknown" as const), key, owner: actor, via, reason: fc.nat({ max: MODEL_REASONS.length - 1 }) }),
    },
    { weight: 2, arbitrary: fc.record({ op: fc.constant("release" as const), key, owner: actor, via }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant("renew" as const), key, owner: actor, via }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constant("lookup" as const), key, via }) },
    { weight: 3, arbitrary: fc.record({ op: fc.constant("expire_lease" as const), key }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant("sweep" as const), via }) },
  ];
  arbs.push({
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant("contend" as const),
      key,
      owner,
      result: fc.nat({ max: MODEL_RESULTS.length - 1 }),
      request,
      first: fc.constantFrom("complete" as const, "claim" as const),
    }),
  });
  if (capabilities.survivesRestart) arbs.push({ weight: 1, arbitrary: fc.constant({ op: "restart" as const }) });
  return fc.oneof(...arbs);
}

interface ModelRow {
  state: RowState;
  fence: number;
  owner?: string;
  /** How many restarts had happened when the row was claimed (a row lost to a restart breaks LEDGER-6). */
  epoch?: number;
  /** The lease was expired by the scenario and nobody has acted on it yet. */
  expired?: boolean;
  result?: string;
  error?: StoredError;
  reason?: string;
  /** The stored request (LEDGER-21): the creating claim's, kept by every later transition. */
  request: string;
}

type ClaimExpectation =
  /** `stored`: the row's request the claim must keep and return; absent when the claim creates the row. */
  | { kind: "claim"; takeover: boolean; fence: number; stored?: string }
  | { kind: "existing"; row: ModelRow };

/**
 * The reference semantics of spec §6 as a plain state machine (what MemoryLedger does). It
 * holds the fences the subject actually issued, so fences need only increase, not be 1, 2, 3.
 */
export class ReferenceModel {
  readonly rows = new Map<number, ModelRow>();
  readonly lastFence = new Map<number, number>();
  /** Restarts so far. */
  epoch = 0;
  /** fences[owner][key]: the fence of the owner's latest successful claim of the key. */
  readonly fences = MODEL_OWNERS.map(() => new Map<number, number>());

  /** The owner of the latest successful claim of the key, for HOLDER steps. */
  latestClaimer(key: number): number {
    const last = this.lastFence.get(key);
    const i = this.fences.findIndex((m) => last !== undefined && m.get(key) === last);
    return i === -1 ? 0 : i;
  }

  fenceOf(owner: number, key: number): number {
    return this.fences[owner]!.get(key) ?? 0;
  }

  /** What a claim must return now. */
  claimExpectation(key: number): ClaimExpectation {
    const row = this.rows.get(key);
    // LEDGER-4: fence 1 for a key without a row, the row's fence + 1 after a release or takeover.
    const fence = (row?.fence ?? 0) + 1;
    if (row === undefined) return { kind: "claim", takeover: false, fence };
    // LEDGER-21: a re-claim after release and a takeover keep the stored request.
    if (row.state === "released") return { kind: "claim", takeover: false, fence, stored: row.request };
    if (row.state !== "in_flight" || !row.expired) return { kind: "existing", row };
    if (MODEL_KEYS[key]!.effect === "keyed_write") return { kind: "claim", takeover: true, fence, stored: row.request };
    return { kind: "existing", row: { state: "unknown", fence: row.fence, reason: "lease_expired", request: row.request } };
  }

  claimed(key: number, owner: number, fence: number, request: string): void {
    this.rows.set(key, { state: "in_flight", fence, owner: MODEL_OWNERS[owner]!, epoch: this.epoch, request });
    this.lastFence.set(key, fence);
    this.fences[owner]!.set(key, fence);
  }

  owns(key: number, fence: number): boolean {
    const row = this.rows.get(key);
    return row !== undefined && row.state === "in_flight" && row.fence === fence;
  }

  clone(): ReferenceModel {
    const copy = new ReferenceModel();
    copy.copyFrom(this);
    return copy;
  }

  copyFrom(other: ReferenceModel): void {
    this.rows.clear();
    for (const [k, row] of other.rows) this.rows.set(k, { ...row });
    this.lastFence.clear();
    for (const [k, f] of other.lastFence) this.lastFence.set(k, f);
    other.fences.forEach((m, i) => {
      this.fences[i]!.clear();
      for (const [k, f] of m) this.fences[i]!.set(k, f);
    });
    this.epoch = other.epoch;
  }

  /** A claim by `owner` sending `request` as the model performs it: returns what the claimant must see. */
  applyClaim(key: number, owner: number, request: string): ClaimExpectation {
    const expectation = this.claimExpectation(key);
    if (expectation.kind === "claim") this.claimed(key, owner, expectation.fence, expectation.stored ?? request);
    else if (expectation.row.state === "unknown" && this.rows.get(key)?.state === "in_flight") this.rows.set(key, expectation.row);
    return expectation;
  }

  /** complete(key, fence, result) as the model performs it. */
  applyComplete(key: number, fence: number, result: string): "ok" | "stale_claim" {
    if (!this.owns(key, fence)) return "stale_claim";
    this.rows.set(key, { state: "completed", fence, result, request: this.rows.get(key)!.request });
    return "ok";
  }

  essence(key: number, keyHex: string, row: ModelRow | undefined): Record<string, unknown> | undefined {
    if (row === undefined) return undefined;
    const effect = MODEL_KEYS[key]!.effect;
    const out: Record<string, unknown> = { key: keyHex, state: row.state, fence: row.fence, effect, toolName: TOOL_FOR[effect] };
    if (row.state === "in_flight") out.owner = row.owner;
    if (row.state === "completed") out.result = row.result;
    if (row.state === "failed") out.error = row.error;
    if (row.state === "unknown") out.reason = row.reason;
    out.request = row.request;
    return out;
  }
}

/** rowEssence plus the stored request (LEDGER-21): what the model compares. */
function fullEssence(row: Parameters<typeof rowEssence>[0]): Record<string, unknown> | undefined {
  const e = rowEssence(row);
  if (e === undefined) return undefined;
  e.request = (row as Record<string, unknown>).request;
  return e;
}

function withoutRequest(e: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (e === undefined) return undefined;
  const { request: _request, ...rest } = e;
  return rest;
}

/** A disagreement between subject and model, with the rule the subject's behaviour breaks. */
export class StepMismatch extends ConformanceFailure {}


/** Drives the subject through one scenario; records a readable timeline as it goes. */
export class ScenarioDriver {
  readonly timeline: string[] = [];
  /** The scenario's keys come from the seed: every run (each on a fresh namespace) and every replay meets the same ones. */
  private readonly keys: string[];
  private instances: Ledger[];
  private t = 0;

  constructor(
    private readonly subject: LedgerSubject,
    private readonly fixture: LedgerFixture,
    seed = 0,
  ) {
    this.instances = [fixture.ledger];
    this.keys = MODEL_KEYS.map((k) => seededKey(seed, "model", k.label));
  }

  /** Opens every instance up front: opening one is not an event of the scenario. */
  async open(): Promise<void> {
    if (this.subject.capabilities.sharedAcrossProcesses) this.instances = [this.instances[0]!, await this.fixture.reopen()];
  }

  private async via(index: number): Promise<Ledger> {
    const i = this.subject.capabilities.sharedAcrossProcesses ? index : 0;
    while (this.instances.length <= i) this.instances.push(await this.fixture.reopen());
    return this.instances[i]!;
  }

  private viaLabel(index: number): string {
    return this.subject.capabilities.sharedAcrossProcesses ? ` via ledger#${index + 1}` : "";
  }

  async perform(model: ReferenceModel, given: Step): Promise<void> {
    this.t++;
    const step: Step = "owner" in given && given.owner === HOLDER ? { ...given, owner: model.latestClaimer(given.key) } : given;
    const fence = "owner" in step && step.op !== "claim" && step.op !== "contend" ? ` fence=${model.fenceOf(step.owner, step.key) || "0 (holds none)"}` : "";
    const prefix = `t=${this.t} ${describeStep(step)}${fence}${"via" in step ? this.viaLabel(step.via) : ""}`;
    try {
      const outcome = await this.execute(model, step);
      this.timeline.push(`${prefix} -> ${outcome}`);
    } catch (error) {
      if (error instanceof StepMismatch) {
        const { actual, expected } = (error.cause ?? {}) as { actual?: string; expected?: string };
        this.timeline.push(`${prefix} -> ${actual ?? "?"}`);
        this.timeline.push(`      ✗ expected ${expected ?? "?"} (${error.violates})`);
        throw new StepMismatch(`t=${this.t} ${describeStep(step)}: ${error.message}`, { violates: error.violates ?? "LEDGER-3" });
      }
      this.timeline.push(`${prefix} -> threw ${describeError(error)}`);
      throw new StepMismatch(`t=${this.t} ${describeStep(step)} threw ${describeError(error)}`, { violates: ruleForError(error), cause: error });
    }
  }

  private async execute(model: ReferenceModel, step: Step): Promise<string> {
    switch (step.op) {
      case "claim":
        return this.claim(model, step.key, [step.owner], [await this.via(step.via)], step.request);
      case "race": {
        const ledgers = await Promise.all(step.owners.map((_, i) => this.via(i % 2)));
        return this.claim(model, step.key, step.owners, ledgers, step.request);
      }
      case "complete":
      case "fail":
      case "markUnknown":
      case "release":
      case "renew":
        return this.ownerOp(model, step, await this.via(step.via));
      case "lookup":
        return this.lookup(model, step.key, await this.via(step.via));
      case "contend":
        return this.contend(model, step);
      case "expire_lease": {
        const row = model.rows.get(step.key);
        if (row?.state !== "in_flight") return "nothing in flight (no-op)";
        // The hook needs the in-flight row; one the store lost (a restart that forgot it) is the finding, not a hook error.
        const stored = await this.fixture.raw.read(this.keys[step.key]!);
        if (stored?.state !== "in_flight") {
          const lost = row.epoch !== undefined && row.epoch !== model.epoch;
          fail(lost ? "LEDGER-6" : "LEDGER-3", `stored ${stored === undefined ? "no row" : describeEssence(rowEssence(stored)!)}`, `stored in_flight fence=${row.fence}`, `the in-flight row (fence ${row.fence}) is no longer stored${lost ? " after a restart" : ""}`);
        }
        await this.fixture.raw.expireLease(this.keys[step.key]!);
        row.expired = true;
        return `lease of fence=${row.fence} expired`;
      }
      case "sweep": {
        const removed = await (await this.via(step.via)).sweep();
        if (removed !== 0) fail("LEDGER-13", `sweep removed ${removed}`, "sweep removed 0 (no retention has passed)", `sweep removed ${removed} rows although no retention had passed`);
        return "removed 0";
      }
      case "restart":
        this.instances = [await this.fixture.reopen()];
        if (this.subject.capabilities.sharedAcrossProcesses) this.instances.push(await this.fixture.reopen());
        model.epoch++;
        return "every instance replaced by a fresh one over the same store";
    }
  }

  private async claim(model: ReferenceModel, key: number, owners: number[], ledgers: Ledger[], request: number): Promise<string> {
    const keyHex = this.keys[key]!;
    const effect = MODEL_KEYS[key]!.effect;
    const expectation = model.claimExpectation(key);
    const texts = owners.map((_, i) => raceRequest(key, request, i));
    const results: ClaimResult[] = await Promise.all(
      owners.map((o, i) => ledgers[i]!.claim(claimRequest(keyHex, MODEL_OWNERS[o]!, effect, LEASE_MS, texts[i]))),
    );
    const race = owners.length > 1;
    const winners = results.flatMap((r, i) => (r.outcome === "claimed" ? [{ r, owner: owners[i]!, sent: texts[i]! }] : []));
    const summary = summarizeClaims(results, owners);
    if (expectation.kind === "claim") {
      if (winners.length !== 1) {
        const expected = `exactly one claimed (fence=${expectation.fence}${expectation.takeover ? ", takeover" : ""})`;
        if (winners.length > 1) fail("LEDGER-1", summary, expected, `${winners.length} concurrent claims of one key won`);
        const row = model.rows.get(key);
        const rule = expectation.takeover ? "LEDGER-7" : row?.state === "released" ? "LEDGER-3" : "LEDGER-3";
        fail(rule, summary, expected, `claim did not win although the key was ${row === undefined ? "absent" : expectation.takeover ? "an expired keyed_write claim" : row.state}`);
      }
      const { r, owner, sent } = winners[0]!;
      if (r.outcome !== "claimed") throw new Error("unreachable");
      if (r.fence !== expectation.fence) {
        fail("LEDGER-4", summary, `fence=${expectation.fence}`, `the claim got fence ${r.fence}; LEDGER-4 gives ${expectation.fence} (1 for a new key, the previous fence + 1 after release or takeover)`);
      }
      if (r.takeover !== expectation.takeover) {
        fail(expectation.takeover ? "LEDGER-7" : "LEDGER-3", summary, `takeover ${expectation.takeover}`, `takeover reported ${r.takeover}`);
      }
      const stored = expectation.stored ?? sent;
      if (r.request !== stored) {
        fail("LEDGER-21", summary, `claimed fence=${expectation.fence} request=${requestLabel(stored)}`, claimedRequestProblem(expectation, sent, r.request));
      }
      model.claimed(key, owner, r.fence, stored);
      const expectedRow = model.essence(key, keyHex, model.rows.get(key));
      for (const [i, other] of results.entries()) {
        if (other.outcome === "claimed") continue;
        const seen = fullEssence(other.row);
        if (!isDeepStrictEqual(seen, expectedRow)) {
          const rule = ruleForRowDifference(seen, expectedRow) === "LEDGER-21" ? "LEDGER-21" : "LEDGER-1";
          fail(rule, summary, `losers see the winner's row ${describeEssence(expectedRow!)}`, `${MODEL_OWNERS[owners[i]!]} saw ${describeEssence(seen!)}${requestMismatch(seen, expectedRow)}`);
        }
      }
      return summary;
    }
    // The key is held: every claimant must see the held row (an expired unkeyed_write as unknown).
    const expectedRow = model.essence(key, keyHex, expectation.row);
    if (winners.length > 0) {
      const held = model.rows.get(key)!;
      const rule = heldRowRule(held, race, model.epoch);
      fail(rule, summary, `existing ${describeModelRow(expectation.row)}`, `a claim won although the key is held (${describeModelRow(held)}${held.expired ? ", lease expired" : ""})`);
    }
    for (const result of results) {
      if (result.outcome !== "existing") continue;
      const actual = fullEssence(result.row);
      if (!isDeepStrictEqual(actual, expectedRow)) {
        fail(ruleForRowDifference(actual, expectedRow), summary, `existing ${describeModelRow(expectation.row)}`, `claim returned ${show(withoutRequest(actual))}, expected ${show(withoutRequest(expectedRow))}${requestMismatch(actual, expectedRow)}`);
      }
    }
    if (expectation.row.state === "unknown" && model.rows.get(key)?.state === "in_flight") {
      model.rows.set(key, expectation.row);
    }
    return summary;
  }

  private async ownerOp(model: ReferenceModel, step: Extract<Step, { owner: number; via: number }>, ledger: Ledger): Promise<string> {
    const keyHex = this.keys[step.key]!;
    const fence = model.fenceOf(step.owner, step.key);
    const owned = model.owns(step.key, fence);
    let actual = "ok";
    let thrown: unknown;
    try {
      switch (step.op) {
        case "complete":
          await ledger.complete(keyHex, fence, MODEL_RESULTS[step.result]!);
          break;
        case "fail":
          await ledger.fail(keyHex, fence, MODEL_ERRORS[step.error]!);
          break;
        case "markUnknown":
          await ledger.markUnknown(keyHex, fence, MODEL_REASONS[step.reason]!);
          break;
        case "release":
          await ledger.release(keyHex, fence);
          break;
        case "renew":
          await ledger.renew(keyHex, fence, LEASE_MS);
          break;
        case "claim":
          throw new Error("unreachable");
      }
    } catch (error) {
      thrown = error;
      actual = codeOf(error) ?? describeError(error);
    }
    if (!owned) {
      if (thrown === undefined) {
        const row = model.rows.get(step.key);
        fail("LEDGER-5", "ok", "stale_claim", `${step.op} with fence ${fence} was accepted although ${row === undefined ? "no row exists" : `the row is ${describeModelRow(row)}`}`);
      }
      if (codeOf(thrown) !== "stale_claim") fail(ruleForError(thrown), actual, "stale_claim", `${step.op} raised ${describeError(thrown)} instead of stale_claim`);
      return "stale_claim";
    }
    if (thrown !== undefined) {
      const held = model.rows.get(step.key);
      // An owner refused after a restart: the in-flight row did not survive it.
      const lost = codeOf(thrown) === "stale_claim" && held?.epoch !== undefined && held.epoch !== model.epoch;
      fail(lost ? "LEDGER-6" : step.op === "renew" ? "LEDGER-9" : "LEDGER-3", actual, "ok", `${step.op} by the owning fence ${fence} raised ${describeError(thrown)}`);
    }
    const row = model.rows.get(step.key)!;
    // Every transition keeps the stored request (LEDGER-21).
    const { request } = row;
    switch (step.op) {
      case "complete":
        model.rows.set(step.key, { state: "completed", fence, result: MODEL_RESULTS[step.result]!, request });
        break;
      case "fail":
        model.rows.set(step.key, { state: "failed", fence, error: MODEL_ERRORS[step.error]!, request });
        break;
      case "markUnknown":
        model.rows.set(step.key, { state: "unknown", fence, reason: MODEL_REASONS[step.reason]!, request });
        break;
      case "release":
        model.rows.set(step.key, { state: "released", fence, request });
        break;
      case "renew":
        row.expired = false;
        break;
    }
    return "ok";
  }

  /**
   * The holder's complete and another claim run concurrently; the outcome must be one of the two
   * serial orders (linearizability): complete then claim, or claim then complete.
   */
  private async contend(model: ReferenceModel, step: Extract<Step, { op: "contend" }>): Promise<string> {
    const keyHex = this.keys[step.key]!;
    const effect = MODEL_KEYS[step.key]!.effect;
    const holder = model.latestClaimer(step.key);
    const fence = model.fenceOf(holder, step.key);
    const text = MODEL_RESULTS[step.result]!;
    const sent = MODEL_REQUESTS[step.key]![step.request]!;
    const [completer, claimer] = [await this.via(0), await this.via(1)];
    const completing = () =>
      completer.complete(keyHex, fence, text).then(
        () => "ok",
        (error: unknown) => codeOf(error) ?? describeError(error),
      );
    const claiming = () => claimer.claim(claimRequest(keyHex, MODEL_OWNERS[step.owner]!, effect, LEASE_MS, sent));
    // Both calls start before either is awaited; which starts first decides which one a racy ledger lets in.
    const [completed, claim] =
      step.first === "claim"
        ? await Promise.all([claiming(), completing()]).then(([c, d]) => [d, c] as const)
        : await Promise.all([completing(), claiming()]);
    const summary = `${MODEL_OWNERS[holder]} complete fence=${fence} -> ${completed}; ${MODEL_OWNERS[step.owner]} claim -> ${describeClaim(claim)}`;
    const candidates = (["complete first", "claim first"] as const).map((order) => {
      const m = model.clone();
      let c: string;
      let p: ClaimExpectation;
      let row: Record<string, unknown> | undefined;
      if (order === "complete first") {
        c = m.applyComplete(step.key, fence, text);
        p = m.applyClaim(step.key, step.owner, sent);
      } else {
        p = m.applyClaim(step.key, step.owner, sent);
        c = m.applyComplete(step.key, fence, text);
      }
      if (p.kind === "existing") row = m.essence(step.key, keyHex, p.row);
      // The order is decided without the request; which request came back is checked once it is (LEDGER-21).
      const matches =
        c === completed &&
        (p.kind === "claim"
          ? claim.outcome === "claimed" && claim.fence === p.fence && claim.takeover === p.takeover
          : claim.outcome === "existing" && isDeepStrictEqual(rowEssence(claim.row), withoutRequest(row)));
      const expected = `complete -> ${c}; claim -> ${p.kind === "claim" ? `claimed fence=${p.fence}${p.takeover ? " (takeover)" : ""}` : `existing ${describeEssence(row!)}`}`;
      return { order, m, matches, expected, c, p, row };
    });
    const match = candidates.find((c) => c.matches);
    if (match === undefined) {
      // Which write came last tells who overwrote whom: the stored row after both.
      const after = await this.fixture.raw.read(keyHex);
      const rule = contendRule(model, step.key, completed, claim, candidates, after?.state);
      fail(
        rule,
        summary,
        candidates.map((c) => `${c.order}: ${c.expected}`).join(" | or | "),
        `concurrent complete and claim match neither serial order (${summary})`,
      );
    }
    if (match.p.kind === "claim") {
      const stored = match.p.stored ?? sent;
      if (claim.outcome === "claimed" && claim.request !== stored) {
        fail("LEDGER-21", summary, `claimed fence=${match.p.fence} request=${requestLabel(stored)} (as if ${match.order})`, claimedRequestProblem(match.p, sent, claim.request));
      }
    } else if (claim.outcome === "existing") {
      const actual = fullEssence(claim.row);
      if (!isDeepStrictEqual(actual, match.row)) {
        fail("LEDGER-21", summary, `existing ${describeEssence(match.row!)} (as if ${match.order})`, `the row returned to the claim keeps a different request${requestMismatch(actual, match.row)}`);
      }
    }
    model.copyFrom(match.m);
    return `${summary} (as if ${match.order})`;
  }

  private async lookup(model: ReferenceModel, key: number, ledger: Ledger): Promise<string> {
    const keyHex = this.keys[key]!;
    const expected = model.essence(key, keyHex, model.rows.get(key));
    const actual = fullEssence(await ledger.lookup(keyHex));
    const text = actual === undefined ? "no row" : describeEssence(actual);
    if (!isDeepStrictEqual(actual, expected)) {
      const held = model.rows.get(key);
      const actedOnExpiry = held?.state === "in_flight" && held.expired === true && actual?.state !== "in_flight";
      fail(actedOnExpiry ? "LEDGER-17" : ruleForRowDifference(actual, expected), text, expected === undefined ? "no row" : describeEssence(expected), `lookup returned ${show(withoutRequest(actual))}, expected ${show(withoutRequest(expected))}${requestMismatch(actual, expected)}`);
    }
    const raw = await this.fixture.raw.read(keyHex);
    const stored = raw === undefined ? undefined : { state: raw.state, fence: Number(raw.fence) };
    const want = expected === undefined ? undefined : { state: expected.state, fence: expected.fence };
    if (!isDeepStrictEqual(stored, want)) {
      fail("LEDGER-2", `${text}; stored ${show(stored)}`, `stored ${show(want)}`, `raw.read shows ${show(stored)} while the ledger reports ${show(want)}`);
    }
    // What is stored, not only what the adapter says, keeps the request byte for byte (LEDGER-21).
    if (raw !== undefined && expected !== undefined && raw.request !== expected.request) {
      fail("LEDGER-21", `${text}; stored request=${requestLabel(raw.request)}`, `stored request=${requestLabel(expected.request)}`, `raw.read shows the stored request ${requestLabel(raw.request)}, expected ${requestLabel(expected.request)}: ${textDiff(expected.request as string, raw.request)}`);
    }
    return text;
  }
}

function fail(rule: string, actual: string, expected: string, message: string): never {
  throw new StepMismatch(message, { violates: rule, cause: { actual, expected } });
}

/** The request the i-th claimant of a claim or race step sends. */
function raceRequest(key: number, request: number, i: number): string {
  return MODEL_REQUESTS[key]![(request + i) % MODEL_REQUESTS_PER_KEY]!;
}

/** Which part of LEDGER-21 a claimed result with the wrong request breaks, and how. */
function claimedRequestProblem(expectation: Extract<ClaimExpectation, { kind: "claim" }>, sent: string, got: unknown): string {
  const stored = expectation.stored ?? sent;
  const aspect =
    expectation.stored === undefined
      ? "the claim that creates the row must store the claimant's request and return it"
      : expectation.takeover
        ? "a keyed_write takeover must keep the stored request and return it, not the claimant's"
        : "a re-claim after release must keep the stored request and return it, not the claimant's";
  const own = expectation.stored !== undefined && got === sent && sent !== stored ? " (the claimant's own)" : "";
  return `${aspect}: the claim returned request ${requestLabel(got)}${own}, expected ${requestLabel(stored)}; ${textDiff(stored, got)}`;
}

/** "; request k1#2, expected k1#0 (...)" when two essences differ in their request, else "". */
function requestMismatch(actual: Record<string, unknown> | undefined, expected: Record<string, unknown> | undefined): string {
  if (actual === undefined || expected === undefined || actual.request === expected.request) return "";
  return `; request ${requestLabel(actual.request)}, expected ${requestLabel(expected.request)} (${textDiff(expected.request as string, actual.request)})`;
}

/** Which rule a concurrent complete + claim breaks when it matches neither serial order. */
function contendRule(
  model: ReferenceModel,
  key: number,
  completed: string,
  claim: ClaimResult,
  candidates: Array<{ c: string; p: ClaimExpectation; row: Record<string, unknown> | undefined }>,
  storedAfter?: unknown,
): string {
  const claimActed = claim.outcome === "claimed" || (claim.row.state === "unknown" && claim.row.reason === "lease_expired");
  if (completed === "ok" && claimActed && model.rows.get(key)?.state === "in_flight") {
    // Both won. The completion written last overwrote a row the claim had acted on (a stale owner's
    // write, LEDGER-5); the claim's write last turned a completed row back (the expiry was not atomic, LEDGER-7).
    return storedAfter === undefined || storedAfter === "completed" ? "LEDGER-5" : "LEDGER-7";
  }
  const same = candidates.filter((c) => c.c === completed);
  const pick =
    same.find((c) => (c.p.kind === "claim") === (claim.outcome === "claimed") && (c.row === undefined || claim.outcome !== "existing" || c.row.state === claim.row.state)) ??
    same[0] ??
    candidates[1]!;
  if (pick.p.kind === "existing") {
    const held = model.rows.get(key);
    if (claim.outcome === "claimed") return held === undefined ? "LEDGER-3" : heldRowRule(held, true, model.epoch);
    return ruleForRowDifference(rowEssence(claim.row), withoutRequest(pick.row));
  }
  if (claim.outcome === "claimed") return claim.fence !== pick.p.fence ? "LEDGER-4" : pick.p.takeover ? "LEDGER-7" : "LEDGER-3";
  return pick.p.takeover ? "LEDGER-7" : "LEDGER-3";
}

/** Which rule a claim breaks by winning a key the model holds. */
function heldRowRule(held: ModelRow, race: boolean, epoch: number): string {
  switch (held.state) {
    case "in_flight":
      if (held.expired) return "LEDGER-7";
      if (held.epoch !== epoch) return "LEDGER-6";
      return race ? "LEDGER-1" : "LEDGER-6";
    case "failed":
      return "LEDGER-8";
    case "unknown":
      return held.reason === "lease_expired" ? "LEDGER-7" : "LEDGER-3";
    default:
      return "LEDGER-3";
  }
}

function ruleForError(error: unknown): string {
  switch (codeOf(error)) {
    case "ledger_unavailable":
      return "LEDGER-12";
    case "ledger_corrupt":
      return "LEDGER-11";
    case "result_not_storable":
      return "LEDGER-10";
    default:
      return "LEDGER-3";
  }
}

function ruleForRowDifference(actual: Record<string, unknown> | undefined, expected: Record<string, unknown> | undefined): string {
  if (actual === undefined || expected === undefined) return expected?.state === "in_flight" ? "LEDGER-6" : "LEDGER-3";
  if (actual.state !== expected.state) {
    return expected.state === "unknown" && expected.reason === "lease_expired" ? "LEDGER-7" : expected.state === "failed" ? "LEDGER-8" : "LEDGER-3";
  }
  if (actual.fence !== expected.fence) return "LEDGER-4";
  if (actual.result !== expected.result) return "LEDGER-10";
  if (!isDeepStrictEqual(actual.error, expected.error)) return "LEDGER-8";
  if (actual.reason !== expected.reason) return expected.reason === "lease_expired" ? "LEDGER-7" : "LEDGER-3";
  // Everything else agrees: the row carries another request than the one stored (LEDGER-21).
  if (actual.request !== expected.request) return "LEDGER-21";
  return "LEDGER-3";
}

function summarizeClaims(results: ClaimResult[], owners: number[]): string {
  if (results.length === 1) return describeClaim(results[0]!);
  return results.map((r, i) => `${MODEL_OWNERS[owners[i]!]}: ${describeClaim(r)}`).join("; ");
}

function describeClaim(r: ClaimResult): string {
  if (r.outcome === "claimed") return `claimed fence=${r.fence}${r.takeover ? " (takeover)" : ""} request=${requestLabel(r.request)}`;
  return `existing ${describeEssence(fullEssence(r.row)!)}`;
}

function describeEssence(e: Record<string, unknown>): string {
  const bits = [String(e.state), `fence=${String(e.fence)}`];
  if (e.state === "in_flight") bits.push(`owner=${String(e.owner)}`);
  if (e.state === "completed") bits.push(`result=${show(e.result)}`);
  if (e.state === "failed") bits.push(`error=${show((e.error as StoredError | undefined)?.name)}`);
  if (e.state === "unknown") bits.push(`reason=${String(e.reason)}`);
  if ("request" in e) bits.push(`request=${requestLabel(e.request)}`);
  return bits.join(" ");
}

function describeModelRow(row: ModelRow): string {
  return describeEssence({ ...row });
}

/** `claim k1 (keyed_write) by owner-b`, `complete k2 by owner-a with "null"`. */
export function describeStep(step: Step): string {
  const k = "key" in step ? MODEL_KEYS[step.key]! : undefined;
  const who = "owner" in step ? ` by ${MODEL_OWNERS[step.owner]}` : "";
  switch (step.op) {
    case "claim":
      return `claim ${k!.label} (${k!.effect})${who} sending ${requestLabel(raceRequest(step.key, step.request, 0))}`;
    case "race":
      return `race ${k!.label} (${k!.effect}) by ${step.owners.map((o, i) => `${MODEL_OWNERS[o]} sending ${requestLabel(raceRequest(step.key, step.request, i))}`).join(", ")} concurrently`;
    case "complete":
      return `complete ${k!.label}${who} with ${show(MODEL_RESULTS[step.result])}`;
    case "fail":
      return `fail ${k!.label}${who} with ${MODEL_ERRORS[step.error]!.name}`;
    case "markUnknown":
      return `markUnknown ${k!.label}${who} reason ${MODEL_REASONS[step.reason]}`;
    case "release":
    case "renew":
      return `${step.op} ${k!.label}${who}`;
    case "lookup":
      return `lookup ${k!.label}`;
    case "expire_lease":
      return `expire_lease ${k!.label}`;
    case "sweep":
      return "sweep";
    case "restart":
      return "restart";
    case "contend":
      return step.first === "claim"
        ? `contend ${k!.label} (${k!.effect}): ${MODEL_OWNERS[step.owner]} claims sending ${requestLabel(MODEL_REQUESTS[step.key]![step.request])} while the latest claimant completes with ${show(MODEL_RESULTS[step.result])}, concurrently (claim issued first)`
        : `contend ${k!.label} (${k!.effect}): the latest claimant completes with ${show(MODEL_RESULTS[step.result])} while ${MODEL_OWNERS[step.owner]} claims sending ${requestLabel(MODEL_REQUESTS[step.key]![step.request])}, concurrently (complete issued first)`;
  }
}

class StepCommand implements fc.AsyncCommand<ReferenceModel, ScenarioDriver> {
  constructor(readonly step: Step) {}
  check(): boolean {
    return true;
  }
  async run(model: ReferenceModel, driver: ScenarioDriver): Promise<void> {
    await driver.perform(model, this.step);
  }
  toString(): string {
    return describeStep(this.step);
  }
}

/** Runs one scenario against a fresh namespace of the subject, through fast-check's asyncModelRun. */
export async function runScenario(
  subject: LedgerSubject,
  steps: readonly Step[],
  options: { seed?: number } = {},
): Promise<{ timeline: string[]; error?: StepMismatch }> {
  const fixture = await subject.create();
  const driver = new ScenarioDriver(subject, fixture, options.seed ?? 0);
  try {
    await driver.open();
    await fc.asyncModelRun(() => ({ model: new ReferenceModel(), real: driver }), steps.map((s) => new StepCommand(s)));
    return { timeline: driver.timeline };
  } catch (error) {
    if (error instanceof StepMismatch) return { timeline: driver.timeline, error };
    throw error;
  } finally {
    await fixture.destroy();
  }
}
