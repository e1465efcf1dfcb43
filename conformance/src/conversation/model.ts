import fc from "fast-check";
import { randomUUID } from "node:crypto";
import { isDeepStrictEqual } from "node:util";
import { MemoryConversationStore, type ConversationStore, type JsonValue, type TurnCommit, type TurnSnapshot } from "@dispatch-once/core";
import { inspect } from "node:util";
import { ConformanceFailure, codeOf, describeError } from "../failure.js";
import type { Counterexample } from "../types.js";
import { failedCase, propertyRunOptions, runProperty } from "../ledger/property-runner.js";
import { memoryConversationState, memoryRaw } from "./memory-subject.js";
import { LEASE_MS, TRICKY_CONTENT, assistantText, toolResult, toolUse, userText } from "./support.js";
import type { ConversationStoreFixture, ConversationStoreSubject } from "./types.js";

export const CONVERSATION_MODEL_CHECK_NAME =
  "model-based: random append/acquire/renew/release/begin/commit/fail/record/expire/restart sequences and races agree with MemoryConversationStore";

/** Which fence a step presents: the latest one issued, the one before it, or one never issued. */
export type FenceRef = "latest" | "previous" | "never";

/**
 * One step of a random scenario. Conversations, messages, owners and payloads are named by
 * index so that fast-check shrinks a failing sequence by dropping steps; a fence is resolved
 * when the step runs, against the fences each side (subject and model) has issued itself.
 */
export type ConversationStep =
  | { op: "append"; conv: number; msg: number; content: number; via: number }
  /** A re-send of the message of the latest snapshot (back 0) or the one before it (back 1): a retry, a double click. */
  | { op: "resend"; conv: number; back: number; content: number; via: number }
  | { op: "message"; conv: number; msg: number; via: number }
  | { op: "turnsOf"; conv: number; msg: number; via: number }
  | { op: "log"; conv: number; via: number }
  | { op: "records"; conv: number; via: number }
  | { op: "acquire"; conv: number; owner: number; via: number }
  | { op: "acquireRace"; conv: number; owners: number[] }
  | { op: "renew"; conv: number; fence: FenceRef; via: number }
  | { op: "release"; conv: number; fence: FenceRef; via: number }
  | { op: "begin"; conv: number; fence: FenceRef; via: number }
  /** Commit the latest snapshot's turn (msg -1) or name message `msg`; turnIndex = expected + delta. */
  | { op: "commit"; conv: number; fence: FenceRef; msg: number; delta: number; payload: number; tool: boolean; answers: boolean; via: number }
  /** The usual path in one step: begin with the latest fence, then commit that snapshot's turn. */
  | { op: "turn"; conv: number; payload: number; tool: boolean; answers: boolean; via: number }
  /** Several instances commit the latest snapshot's turn at once, with different payloads. */
  | { op: "commitRace"; conv: number; payloads: number[]; answers: boolean }
  | { op: "fail"; conv: number; fence: FenceRef; msg: number; record: number; via: number }
  | { op: "addRecord"; conv: number; record: number; via: number }
  | { op: "expire"; conv: number }
  | { op: "restart" };

const CONVERSATIONS = 2;
const MESSAGES = 4;
const OWNERS = ["owner-a", "owner-b", "owner-c"];

/** Payloads: plain chat content and the kit's tricky content (non-ASCII, escapes, numbers, nesting). */
export const MODEL_CONTENT: JsonValue[] = [
  userText("pay alice 10 €"),
  userText("pay bob"),
  assistantText("done ✓"),
  toolUse("toolu_1", { amount: 1250, to: "acct_zoë" }),
  toolResult("toolu_1", "paid"),
  ...TRICKY_CONTENT.filter((t) => !t.label.includes("64 KiB") && !t.label.includes("200 levels")).map((t) => t.value),
];

export function conversationStepArbitrary(capabilities: { survivesRestart: boolean; sharedAcrossProcesses: boolean }): fc.Arbitrary<ConversationStep> {
  // Most steps meet one conversation, so that its messages get far; the other shows isolation.
  const conv = fc.oneof({ weight: 5, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.nat({ max: CONVERSATIONS - 1 }) });
  const msg = fc.nat({ max: MESSAGES - 1 });
  const content = fc.nat({ max: MODEL_CONTENT.length - 1 });
  const owner = fc.nat({ max: OWNERS.length - 1 });
  const via = capabilities.sharedAcrossProcesses ? fc.nat({ max: 1 }) : fc.constant(0);
  // Most steps present the latest fence, so that valid transitions are as common as stale ones.
  const fence = fc.oneof(
    { weight: 8, arbitrary: fc.constant<FenceRef>("latest") },
    { weight: 1, arbitrary: fc.constant<FenceRef>("previous") },
    { weight: 1, arbitrary: fc.constant<FenceRef>("never") },
  );
  const target = fc.oneof({ weight: 4, arbitrary: fc.constant(-1) }, { weight: 1, arbitrary: msg });
  const delta = fc.oneof({ weight: 6, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.constantFrom(-1, 1) });
  const arbs: Array<{ weight: number; arbitrary: fc.Arbitrary<ConversationStep> }> = [
    { weight: 6, arbitrary: fc.record({ op: fc.constant("append" as const), conv, msg, content, via }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constant("message" as const), conv, msg, via }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant("turnsOf" as const), conv, msg, via }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constant("log" as const), conv, via }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant("records" as const), conv, via }) },
    { weight: 5, arbitrary: fc.record({ op: fc.constant("acquire" as const), conv, owner, via }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constant("resend" as const), conv, back: fc.nat({ max: 1 }), content, via }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant("acquireRace" as const), conv, owners: fc.uniqueArray(owner, { minLength: 2, maxLength: 3 }) }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant("renew" as const), conv, fence, via }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant("release" as const), conv, fence, via }) },
    { weight: 3, arbitrary: fc.record({ op: fc.constant("begin" as const), conv, fence, via }) },
    { weight: 6, arbitrary: fc.record({ op: fc.constant("turn" as const), conv, payload: content, tool: fc.boolean(), answers: fc.boolean(), via }) },
    {
      weight: 3,
      arbitrary: fc.record({ op: fc.constant("commit" as const), conv, fence, msg: target, delta, payload: content, tool: fc.boolean(), answers: fc.boolean(), via }),
    },
    { weight: 1, arbitrary: fc.record({ op: fc.constant("commitRace" as const), conv, payloads: fc.array(content, { minLength: 2, maxLength: 4 }), answers: fc.boolean() }) },
    { weight: 3, arbitrary: fc.record({ op: fc.constant("fail" as const), conv, fence, msg: target, record: content, via }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant("addRecord" as const), conv, record: content, via }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constant("expire" as const), conv }) },
  ];
  if (capabilities.survivesRestart) arbs.push({ weight: 1, arbitrary: fc.constant({ op: "restart" as const }) });
  return fc.oneof(...arbs);
}

/** One side of the comparison: its store instances and the fences it has issued per conversation. */
interface Side {
  stores: ConversationStore[];
  fences: number[][];
}

type Outcome = { ok: true; value: unknown } | { ok: false; code: string | undefined; error: unknown };

async function attempt(fn: () => Promise<unknown>): Promise<Outcome> {
  try {
    return { ok: true, value: await fn() };
  } catch (error) {
    return { ok: false, code: codeOf(error), error };
  }
}

/** One line per timeline entry, whatever the value. */
function show(value: unknown): string {
  return inspect(value, { depth: 8, breakLength: Infinity, compact: true, maxStringLength: 120, maxArrayLength: 12 });
}

function fenceOf(side: Side, conv: number, ref: FenceRef): number {
  const issued = side.fences[conv]!;
  if (ref === "latest") return issued.at(-1) ?? 1;
  if (ref === "previous") return issued.at(-2) ?? 0;
  return (issued.at(-1) ?? 0) + 1;
}

function describeOutcome(outcome: Outcome): string {
  return outcome.ok ? show(outcome.value) : `error ${outcome.code ?? describeError(outcome.error)}`;
}

/**
 * The subject's store instances a scenario runs on; shared by the runs of one property so
 * that instances are opened once (and again only by restart steps), not per run.
 */
export interface ScenarioInstances {
  stores: ConversationStore[];
}

export interface ConversationScenarioResult {
  timeline: string[];
  error?: ConformanceFailure;
}

/**
 * Runs one scenario against the subject (over `fixture`, on fresh conversation ids) and a
 * fresh MemoryConversationStore, comparing every answer. Never throws: a disagreement is
 * returned with the timeline up to it.
 */
export async function runConversationScenario(
  subject: ConversationStoreSubject,
  fixture: ConversationStoreFixture,
  steps: readonly ConversationStep[],
  instances: ScenarioInstances = { stores: [] },
): Promise<ConversationScenarioResult> {
  const timeline: string[] = [];
  const run = randomUUID().slice(0, 8);
  const convs = Array.from({ length: CONVERSATIONS }, (_, i) => `model-${run}-c${i + 1}`);
  // The model's clock never moves: its leases expire only when a step expires them.
  const modelNow = 1_800_000_000_000;
  const model = new MemoryConversationStore({ now: () => modelNow });
  const modelRaw = memoryRaw(model, () => modelNow);
  if (instances.stores.length === 0) instances.stores = subject.capabilities.sharedAcrossProcesses ? [fixture.store, await fixture.reopen()] : [fixture.store];
  const real: Side = { stores: instances.stores, fences: convs.map(() => []) };
  const ref: Side = { stores: [model], fences: convs.map(() => []) };
  const snapshots: (TurnSnapshot | undefined)[] = convs.map(() => undefined);
  /** The messages each conversation's snapshots answered, in binding order (without repeats in a row). */
  const bound: string[][] = convs.map(() => []);
  const remember = (conv: number, snapshot: TurnSnapshot) => {
    snapshots[conv] = snapshot;
    if (bound[conv]!.at(-1) !== snapshot.message.id) bound[conv]!.push(snapshot.message.id);
  };
  let t = 0;

  const fail = (rule: string, message: string): ConversationScenarioResult => {
    timeline.push(`  ✗ ${message} (${rule})`);
    return { timeline, error: new ConformanceFailure(message, { violates: rule }) };
  };

  // The reference declares supports.reopenWindow and shows a reopened message's firstFailedAt; a
  // store without the flag MUST NOT show it (TURN-12), so the reference's is left out for such a
  // subject. The model required it of every store: an outside team's MariaDB store, which leaves
  // the OPTIONAL window out, failed here on its first reopen.
  const reference = fixture.store.capabilities.supports?.reopenWindow === true ? (v: unknown) => v : withoutFirstFailedAt;

  /** Compares two outcomes; returns a failure message or undefined. */
  const compare = (actual: Outcome, expected: Outcome, project: (v: unknown) => unknown = withoutStoreClock): string | undefined => {
    if (expected.ok && actual.ok) {
      const a = project(actual.value);
      const e = project(reference(expected.value));
      return isDeepStrictEqual(a, e) ? undefined : `expected ${show(e)}, got ${show(a)}`;
    }
    if (!expected.ok && !actual.ok) {
      return actual.code === expected.code ? undefined : `expected error ${expected.code}, got ${describeOutcome(actual)}`;
    }
    return `expected ${describeOutcome(expected)}, got ${describeOutcome(actual)}`;
  };

  /** The whole state of every conversation, read through the store's own methods. */
  const snapshotOf = async (store: ConversationStore): Promise<unknown> => {
    const out: unknown[] = [];
    for (const c of convs) {
      const messages = [];
      for (let m = 0; m < MESSAGES; m++) messages.push(await store.message(c, `m${m}`));
      const turns = [];
      for (let m = 0; m < MESSAGES; m++) turns.push(await store.turnsOf(c, `m${m}`));
      out.push({ messages, turns, log: await store.log(c), records: await store.records(c) });
    }
    return withoutStoreClock(store === model ? reference(out) : out);
  };

  /** Storage (raw hooks) against the model's state; lease fences against the fences each side issued. */
  const storageAgrees = async (): Promise<ConversationScenarioResult | undefined> => {
    for (const [i, c] of convs.entries()) {
      const rawMessages = withoutStoreClock(await fixture.raw.messages(c));
      const modelMessages = withoutStoreClock(reference(await modelRaw.messages(c)));
      if (!isDeepStrictEqual(rawMessages, modelMessages)) return fail("TURN-11", `${c}: stored messages ${show(rawMessages)}, expected ${show(modelMessages)}`);
      const rawTurns = await fixture.raw.turns(c);
      const modelTurns = await modelRaw.turns(c);
      if (!isDeepStrictEqual(rawTurns, modelTurns)) return fail("TURN-5", `${c}: stored turns ${show(rawTurns)}, expected ${show(modelTurns)}`);
      const rawRecords = await fixture.raw.records(c);
      const modelRecords = await modelRaw.records(c);
      if (!isDeepStrictEqual(rawRecords, modelRecords)) return fail("RECORD-4", `${c}: stored records ${show(rawRecords)}, expected ${show(modelRecords)}`);
      const lease = await fixture.raw.lease(c);
      const modelLease = memoryConversationState(model, c)?.lease;
      const latest = real.fences[i]!.at(-1);
      const stored = lease === undefined || lease.fence === 0 ? undefined : lease.fence;
      if (stored !== latest) return fail("TURN-10", `${c}: stored fence ${show(lease?.fence)}, but the last fence issued was ${show(latest)}`);
      if (lease?.owner !== modelLease?.owner) return fail("TURN-10", `${c}: stored lease holder ${show(lease?.owner)}, expected ${show(modelLease?.owner)}`);
    }
    return undefined;
  };

  for (const step of steps) {
    t++;
    const c = "conv" in step ? convs[step.conv]! : "";
    const via = "via" in step ? step.via % real.stores.length : 0;
    const store = real.stores[via]!;
    const at = `t=${t}`;
    const where = real.stores.length > 1 && "via" in step ? ` via ${via}` : "";
    switch (step.op) {
      case "append":
      case "resend": {
        const id = step.op === "append" ? `m${step.msg}` : bound[step.conv]!.at(-1 - step.back) ?? "m0";
        const message = { id, content: MODEL_CONTENT[step.content]! };
        const expected = await attempt(() => model.appendUserMessage(c, message));
        const actual = await attempt(() => store.appendUserMessage(c, message));
        timeline.push(`${at} ${step.op} ${c} ${id} content#${step.content}${where} -> ${describeOutcome(actual)}`);
        const problem = compare(actual, expected);
        const reopens = expected.ok && (expected.value as { reopened: boolean }).reopened;
        const wasFailed = expected.ok && (expected.value as { message: { state: string } }).message.state === "failed";
        if (problem) {
          // Only the content differs: it did not come back as appended (TURN-7), the rest is TURN-2/TURN-12.
          const withoutContent = (o: Outcome) => (o.ok ? { ...(o.value as object), message: { ...(o.value as { message: object }).message, content: null } } : o.code);
          const rule = isDeepStrictEqual(withoutContent(actual), withoutContent(expected)) ? "TURN-7" : reopens || wasFailed ? "TURN-12" : "TURN-2";
          return fail(rule, `${step.op} of ${id}: ${problem}`);
        }
        break;
      }
      case "message":
      case "turnsOf": {
        const id = `m${step.msg}`;
        const expected = await attempt(() => (step.op === "message" ? model.message(c, id) : model.turnsOf(c, id)));
        const actual = await attempt(() => (step.op === "message" ? store.message(c, id) : store.turnsOf(c, id)));
        timeline.push(`${at} ${step.op} ${c} ${id}${where} -> ${describeOutcome(actual)}`);
        const problem = compare(actual, expected);
        if (problem) return fail(step.op === "message" ? "TURN-11" : "TURN-7", `${step.op}(${id}): ${problem}`);
        break;
      }
      case "log":
      case "records": {
        const expected = await attempt(() => (step.op === "log" ? model.log(c) : model.records(c)));
        const actual = await attempt(() => (step.op === "log" ? store.log(c) : store.records(c)));
        timeline.push(`${at} ${step.op} ${c}${where} -> ${describeOutcome(actual)}`);
        const problem = compare(actual, expected);
        if (problem) return fail(step.op === "log" && !leaksRecord(actual, expected, await model.records(c)) ? "TURN-5" : "RECORD-4", `${step.op}(): ${problem}`);
        break;
      }
      case "acquire": {
        const owner = OWNERS[step.owner]!;
        const expected = await attempt(() => model.acquireLease(c, owner, LEASE_MS));
        const actual = await attempt(() => store.acquireLease(c, owner, LEASE_MS));
        timeline.push(`${at} acquire ${c} by ${owner}${where} -> ${describeLease(actual)}`);
        const problem = checkLease(actual, expected, real, ref, step.conv);
        if (problem) return fail("TURN-10", `acquire by ${owner}: ${problem}`);
        break;
      }
      case "acquireRace": {
        const owners = step.owners.map((o) => OWNERS[o]!);
        const results = await Promise.all(owners.map((owner, i) => attempt(() => real.stores[i % real.stores.length]!.acquireLease(c, owner, LEASE_MS))));
        timeline.push(`${at} acquire race ${c} by ${owners.join(", ")} -> ${results.map(describeLease).join(" | ")}`);
        const winners = results.flatMap((r, i) => (r.ok && (r.value as { acquired: boolean }).acquired ? [i] : []));
        if (winners.length > 1) return fail("TURN-10", `${winners.length} of ${owners.length} concurrent acquires won`);
        // The model takes the acquires in the order that makes the subject's winner (if any) first.
        const first = winners[0] ?? 0;
        const expected = await attempt(() => model.acquireLease(c, owners[first]!, LEASE_MS));
        const problem = checkLease(results[first]!, expected, real, ref, step.conv);
        if (problem) return fail("TURN-10", `acquire race, ${owners[first]}: ${problem}`);
        for (const [i, r] of results.entries()) {
          if (i === first) continue;
          const loser = await attempt(() => model.acquireLease(c, owners[i]!, LEASE_MS));
          const lost = compareLease(r, loser);
          if (lost) return fail("TURN-10", `acquire race, ${owners[i]}: ${lost}`);
        }
        break;
      }
      case "renew":
      case "release": {
        const fr = fenceOf(real, step.conv, step.fence);
        const fm = fenceOf(ref, step.conv, step.fence);
        const expected = await attempt(() => (step.op === "renew" ? model.renewLease(c, fm, LEASE_MS) : model.releaseLease(c, fm)));
        const actual = await attempt(() => (step.op === "renew" ? store.renewLease(c, fr, LEASE_MS) : store.releaseLease(c, fr)));
        timeline.push(`${at} ${step.op} ${c} with the ${step.fence} fence (${fr})${where} -> ${actual.ok ? "ok" : describeOutcome(actual)}`);
        // leaseExpiresAt is on each side's own clock: only success and error codes compare.
        const problem = compare(actual, expected, () => null);
        if (problem) return fail("TURN-10", `${step.op} with the ${step.fence} fence: ${problem}`);
        break;
      }
      case "begin": {
        const fr = fenceOf(real, step.conv, step.fence);
        const fm = fenceOf(ref, step.conv, step.fence);
        const expected = await attempt(() => model.beginTurn(c, fm));
        const actual = await attempt(() => store.beginTurn(c, fr));
        timeline.push(`${at} begin ${c} with the ${step.fence} fence (${fr})${where} -> ${describeSnapshot(actual)}`);
        const problem = compare(actual, expected);
        if (problem) return fail(leaksRecord(actual, expected, await model.records(c)) ? "RECORD-4" : beginRule(actual, expected), `beginTurn: ${problem}`);
        if (expected.ok && expected.value !== undefined) remember(step.conv, expected.value as TurnSnapshot);
        break;
      }
      case "commit": {
        const commitOf = (fence: number): TurnCommit => {
          const snapshot = snapshots[step.conv];
          const messageId = step.msg === -1 ? snapshot?.message.id ?? "m0" : `m${step.msg}`;
          const base = step.msg === -1 ? snapshot?.turnIndex ?? 0 : memoryConversationState(model, c)?.turns.length ?? 0;
          const commit: TurnCommit = {
            fence,
            messageId,
            turnIndex: base + step.delta,
            assistant: MODEL_CONTENT[step.payload]!,
            stopReason: step.tool ? "tool_use" : "end_turn",
            answers: step.answers,
          };
          if (step.tool) commit.toolResults = toolResult(`toolu_${t}`, `result of step ${t}`);
          return commit;
        };
        const mine = commitOf(fenceOf(real, step.conv, step.fence));
        const expected = await attempt(() => model.commitTurn(c, commitOf(fenceOf(ref, step.conv, step.fence))));
        const actual = await attempt(() => store.commitTurn(c, mine));
        timeline.push(
          `${at} commit ${c} ${mine.messageId} at ${mine.turnIndex} with the ${step.fence} fence (${mine.fence}), payload#${step.payload}` +
            `${step.tool ? " +tool results" : ""}${step.answers ? " answers" : ""}${where} -> ${describeOutcome(actual)}`,
        );
        const problem = compare(actual, expected);
        if (problem) return fail("TURN-5", `commitTurn: ${problem}`);
        break;
      }
      case "turn": {
        const fr = fenceOf(real, step.conv, "latest");
        const fm = fenceOf(ref, step.conv, "latest");
        const expected = await attempt(() => model.beginTurn(c, fm));
        const actual = await attempt(() => store.beginTurn(c, fr));
        timeline.push(`${at} begin ${c} with the latest fence (${fr})${where} -> ${describeSnapshot(actual)}`);
        const problem = compare(actual, expected);
        if (problem) return fail(leaksRecord(actual, expected, await model.records(c)) ? "RECORD-4" : beginRule(actual, expected), `beginTurn: ${problem}`);
        if (!expected.ok || expected.value === undefined) break;
        const snapshot = expected.value as TurnSnapshot;
        remember(step.conv, snapshot);
        const commitOf = (fence: number): TurnCommit => {
          const commit: TurnCommit = {
            fence,
            messageId: snapshot.message.id,
            turnIndex: snapshot.turnIndex,
            assistant: MODEL_CONTENT[step.payload]!,
            stopReason: step.tool ? "tool_use" : "end_turn",
            answers: step.answers,
          };
          if (step.tool) commit.toolResults = toolResult(`toolu_${t}`, `result of step ${t}`);
          return commit;
        };
        const committedModel = await attempt(() => model.commitTurn(c, commitOf(fm)));
        const committed = await attempt(() => store.commitTurn(c, commitOf(fr)));
        timeline.push(
          `${at} commit ${c} ${snapshot.message.id} at ${snapshot.turnIndex} with the latest fence (${fr}), payload#${step.payload}` +
            `${step.tool ? " +tool results" : ""}${step.answers ? " answers" : ""}${where} -> ${describeOutcome(committed)}`,
        );
        const wrong = compare(committed, committedModel);
        if (wrong) return fail("TURN-5", `commitTurn: ${wrong}`);
        break;
      }
      case "commitRace": {
        const snapshot = snapshots[step.conv];
        const fr = fenceOf(real, step.conv, "latest");
        const fm = fenceOf(ref, step.conv, "latest");
        const commitOf = (fence: number, payload: number): TurnCommit => ({
          fence,
          messageId: snapshot?.message.id ?? "m0",
          turnIndex: snapshot?.turnIndex ?? 0,
          assistant: MODEL_CONTENT[payload]!,
          stopReason: "end_turn",
          answers: step.answers,
        });
        const results = await Promise.all(step.payloads.map((p, i) => attempt(() => real.stores[i % real.stores.length]!.commitTurn(c, commitOf(fr, p)))));
        timeline.push(
          `${at} commit race ${c} ${snapshot?.message.id ?? "m0"} at ${snapshot?.turnIndex ?? 0} with payloads ${step.payloads.map((p) => `#${p}`).join(", ")}` +
            `${step.answers ? " answers" : ""} -> ${results.map(describeOutcome).join(" | ")}`,
        );
        const winners = results.flatMap((r, i) => (r.ok && (r.value as { committed: boolean }).committed ? [i] : []));
        if (winners.length > 1) return fail("TURN-5", `${winners.length} of ${results.length} concurrent commits of one turn committed`);
        const first = winners[0] ?? 0;
        for (const [i, r] of [[first, results[first]!] as const, ...results.map((r, i) => [i, r] as const).filter(([i]) => i !== first)]) {
          const expected = await attempt(() => model.commitTurn(c, commitOf(fm, step.payloads[i]!)));
          const problem = compare(r, expected);
          if (problem) return fail("TURN-5", `commit race, payload #${step.payloads[i]}: ${problem}`);
        }
        break;
      }
      case "fail": {
        const snapshot = snapshots[step.conv];
        const id = step.msg === -1 ? snapshot?.message.id ?? "m0" : `m${step.msg}`;
        const record = MODEL_CONTENT[step.record]!;
        const fr = fenceOf(real, step.conv, step.fence);
        const fm = fenceOf(ref, step.conv, step.fence);
        const expected = await attempt(() => model.failMessage(c, fm, id, record));
        const actual = await attempt(() => store.failMessage(c, fr, id, record));
        timeline.push(`${at} fail ${c} ${id} with the ${step.fence} fence (${fr}), record#${step.record}${where} -> ${actual.ok ? "ok" : describeOutcome(actual)}`);
        const problem = compare(actual, expected);
        if (problem) return fail(!expected.ok && expected.code === "conversation_lease_lost" ? "TURN-10" : "TURN-12", `failMessage(${id}): ${problem}`);
        break;
      }
      case "addRecord": {
        const record = MODEL_CONTENT[step.record]!;
        const expected = await attempt(() => model.addRecord(c, record));
        const actual = await attempt(() => store.addRecord(c, record));
        timeline.push(`${at} addRecord ${c} record#${step.record}${where} -> ${actual.ok ? "ok" : describeOutcome(actual)}`);
        const problem = compare(actual, expected);
        if (problem) return fail("RECORD-4", `addRecord: ${problem}`);
        break;
      }
      case "expire": {
        if (memoryConversationState(model, c)?.lease === undefined) {
          timeline.push(`${at} expire ${c}'s lease -> nobody holds it`);
          break;
        }
        await modelRaw.expireLease(c);
        await fixture.raw.expireLease(c);
        timeline.push(`${at} expire ${c}'s lease`);
        break;
      }
      case "restart": {
        const before = await snapshotOf(model);
        // The instances this property opened are closed (a stopped process); the fixture's own stays open for later runs.
        for (const old of real.stores) if (old !== fixture.store) await old.close();
        real.stores = subject.capabilities.sharedAcrossProcesses ? [await fixture.reopen(), await fixture.reopen()] : [await fixture.reopen()];
        instances.stores = real.stores;
        timeline.push(`${at} restart (fresh store instances)`);
        for (const [i, s] of real.stores.entries()) {
          const after = await attempt(() => snapshotOf(s));
          if (!after.ok || !isDeepStrictEqual(after.value, before)) {
            return fail("TURN-14", `after the restart, instance ${i} reads ${describeOutcome(after)}, expected ${show(before)}`);
          }
        }
        const stored = await storageAgrees();
        if (stored) return stored;
        break;
      }
    }
  }
  const stored = await storageAgrees();
  if (stored) return stored;
  return { timeline };
}

/**
 * True when the subject's log (or a snapshot's input) holds a kept record more often than the
 * model's does: a record leaked into what the model reads (RECORD-4).
 */
function leaksRecord(actual: Outcome, expected: Outcome, records: JsonValue[]): boolean {
  if (!actual.ok || !expected.ok) return false;
  const listOf = (v: unknown): unknown[] => (Array.isArray(v) ? v : Array.isArray((v as TurnSnapshot | undefined)?.input) ? (v as TurnSnapshot).input : []);
  const a = listOf(actual.value);
  const e = listOf(expected.value);
  const count = (list: unknown[], x: unknown) => list.filter((y) => isDeepStrictEqual(x, y)).length;
  return records.some((r) => count(a, r) > count(e, r));
}

/** A value without any message's `firstFailedAt`: what a store without `supports.reopenWindow` gives (TURN-12). */
function withoutFirstFailedAt(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutFirstFailedAt);
  if (typeof value !== "object" || value === null) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) if (k !== "firstFailedAt") out[k] = withoutFirstFailedAt(v);
  return out;
}

/**
 * A value with each message's `firstFailedAt` (TURN-12) replaced by a marker: it is a time on
 * each side's own clock, so only whether it is there compares (as leaseExpiresAt, below). A
 * message's `boundAt` (TURN-11) and a snapshot's `bound` are left out: the reference gives them and
 * a subject without `supports.boundAt` does not; the deterministic checks judge them for one that does.
 */
function withoutStoreClock(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutStoreClock);
  if (typeof value !== "object" || value === null) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    if (k === "boundAt" && typeof v === "number") continue;
    // Which call bound the message (TURN-11): given by a store with supports.boundAt only, and judged by its check.
    if (k === "bound" && typeof v === "boolean") continue;
    out[k] = k === "firstFailedAt" && typeof v === "number" ? "a store-clock time" : withoutStoreClock(v);
  }
  return out;
}

/**
 * Which rule a wrong beginTurn breaks: a lease answer TURN-10; another message than the
 * model's, TURN-9 (arrival order); the same message at another index or state, TURN-11
 * (binding); another `resumed`, TURN-15 (proposed); other input, TURN-9 (the input holds
 * answered messages and this one only).
 */
function beginRule(actual: Outcome, expected: Outcome): string {
  if (!expected.ok || !actual.ok) return "TURN-10";
  const a = actual.value as TurnSnapshot | undefined;
  const e = expected.value as TurnSnapshot | undefined;
  if (a === undefined || e === undefined || a.message?.id !== e.message.id) return "TURN-9";
  if (!isDeepStrictEqual(withoutStoreClock(a.message), withoutStoreClock(e.message))) return "TURN-11";
  // The right message, bound right, at another index: the index is not the committed count.
  if (a.turnIndex !== e.turnIndex) return "TURN-1";
  if (a.resumed !== e.resumed) return "TURN-15";
  return "TURN-9";
}

function describeLease(outcome: Outcome): string {
  if (!outcome.ok) return describeOutcome(outcome);
  const v = outcome.value as { acquired: boolean; fence?: number; owner?: string };
  return v.acquired ? `acquired fence=${v.fence}` : `held by ${v.owner}`;
}

function describeSnapshot(outcome: Outcome): string {
  if (!outcome.ok) return describeOutcome(outcome);
  const s = outcome.value as TurnSnapshot | undefined;
  if (s === undefined) return "nothing waits";
  return `${s.message.id} at ${s.turnIndex}${s.resumed ? ", resumed" : ""} (input of ${s.input.length})`;
}

/** Acquire outcomes agree on acquired/owner (expiry times are on each side's clock). */
function compareLease(actual: Outcome, expected: Outcome): string | undefined {
  const essence = (o: Outcome): unknown => {
    if (!o.ok) return { error: o.code };
    const v = o.value as { acquired: boolean; owner?: string };
    return v.acquired ? { acquired: true } : { acquired: false, owner: v.owner };
  };
  const a = essence(actual);
  const e = essence(expected);
  return isDeepStrictEqual(a, e) ? undefined : `expected ${show(e)}, got ${show(a)}`;
}

/** Compares an acquire and, when both won, records the fences and requires the subject's to rise. */
function checkLease(actual: Outcome, expected: Outcome, real: Side, ref: Side, conv: number): string | undefined {
  const problem = compareLease(actual, expected);
  if (problem) return problem;
  if (actual.ok && expected.ok && (actual.value as { acquired: boolean }).acquired) {
    const fence = (actual.value as { fence: number }).fence;
    const issued = real.fences[conv]!;
    if (!Number.isSafeInteger(fence) || issued.some((f) => f >= fence)) {
      return `fence ${show(fence)} is not higher than every fence issued before (${issued.join(", ")})`;
    }
    issued.push(fence);
    ref.fences[conv]!.push((expected.value as { fence: number }).fence);
  }
  return undefined;
}

export interface ConversationPropertyOptions {
  runs: number;
  seed: number;
  /** Replays exactly the one case at this fast-check path, once (no search, no shrinking). */
  path?: string;
  maxSteps?: number;
  /**
   * Time limit of the property (runs and shrinking); reaching it fails the check, since an
   * interrupted run certifies nothing. Default an hour (the CLI gives 90 % of the check's limit).
   */
  timeLimitMs?: number;
}

/**
 * Drives the subject and the reference store with random step sequences (fast-check,
 * shrinking by dropping steps), all on one fixture with fresh conversation ids per run. On
 * failure the shrunk sequence is replayed to record a readable timeline, and the failure
 * carries the seed and path that replay it exactly: run through the ledger level's runProperty,
 * so a path runs exactly that one case once (fast-check given a path walks on past a passing
 * case and shrinks a failing one further, under another path).
 */
export async function runConversationModelProperty(subject: ConversationStoreSubject, options: ConversationPropertyOptions): Promise<void> {
  const fixture = await subject.create();
  try {
    const steps = fc.array(conversationStepArbitrary(subject.capabilities), { minLength: 1, maxLength: options.maxSteps ?? 40, size: "max" });
    const instances: ScenarioInstances = { stores: [] };
    let last: Awaited<ReturnType<typeof runConversationScenario>> | undefined;
    const outcome = await runProperty(
      steps,
      async (scenario) => {
        last = await runConversationScenario(subject, fixture, scenario, instances);
        if (last.error !== undefined) throw last.error;
      },
      propertyRunOptions(options),
    );
    const failed = failedCase(outcome, "model-based property", options.runs);
    if (failed === undefined) return;
    const shrunk = failed.value;
    // A replay (a path) ran its one case once: that run is the finding. Otherwise the shrunk case
    // runs once more for a clean timeline (and to tell a deterministic failure from a timing one).
    const replay = failed.replay && last !== undefined ? last : await runConversationScenario(subject, fixture, shrunk, instances);
    const original = failed.error;
    const violates = replay.error?.violates ?? (ConformanceFailure.isInstance(original) ? original.violates : undefined);
    const counterexample: Counterexample = {
      seed: failed.seed,
      path: failed.path,
      timeline: replay.timeline,
      report: failed.report,
      value: shrunk,
      ...(violates === undefined ? {} : { violates }),
      ...(failed.shrinkingInterrupted ? { note: "the time limit cut shrinking short: this counterexample may not be the smallest" } : {}),
    };
    const firstLine = replay.error?.message ?? (original instanceof Error ? original.message : String(original));
    throw new ConformanceFailure(
      [
        `the store disagrees with MemoryConversationStore${violates ? ` (breaks ${violates})` : ""}: ${firstLine}`,
        failed.replay ? `replayed the one case at seed ${failed.seed}, path "${failed.path}":` : `shrunk counterexample after ${failed.numRuns} runs and ${failed.numShrinks} shrinks:`,
        ...replay.timeline.map((l) => `  ${l}`),
        replay.error === undefined && !failed.replay ? "  (the shrunk case passed on replay: the failure is not deterministic)" : "",
        `seed ${failed.seed}, path "${failed.path}" (replay: --seed ${failed.seed} --path "${failed.path}")`,
      ]
        .filter((l) => l !== "")
        .join("\n"),
      { ...(violates === undefined ? {} : { violates }), counterexample },
    );
  } finally {
    await fixture.destroy();
  }
}
